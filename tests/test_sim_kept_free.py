"""The simulator's free-GPU views kept per change (gimbalctl/sim/kept_free.py) equal a
from-scratch build at every change, and a view handed out never changes afterwards."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig
from gimbalctl.sim.engine import Simulator
from gimbalctl.sim.kept_free import KeptFree
from policies.model import Counted, Node
from random_jobs import plain_jobs
from policy_probe import PolicyProbe

MODELS = default_models()


def scratch(nodes, busy):
    """(free_gpus, free_index, free_buckets) built from nothing: every node in node order."""
    index = {}
    for n in nodes:
        t = tuple(g for g in n.gpus() if g not in busy)
        if t:
            index[n.name] = t
    free = tuple(g for t in index.values() for g in t)
    buckets = {}
    for rank, n in enumerate(nodes):
        if n.name in index:
            buckets.setdefault(len(index[n.name]), []).append((rank, n.name))
    return free, index, {c: tuple(sorted(b)) for c, b in buckets.items()}


def check(views, expect, items=True):
    """The views equal a build from scratch.  The simulator's free_gpus is a Counted whose
    count is known before its GPUs are chained (and ``items=False`` leaves them unmade, for
    a later check after the simulator moved on); KeptFree's own views are tuples."""
    free, index, buckets = views
    e_free, e_index, e_buckets = expect
    if type(free) is Counted:
        made = free._items is not None
        assert len(free) == len(e_free) and bool(free) == bool(e_free)
        assert (free._items is not None) == made  # the length did not make it
        if items:
            assert free == e_free and tuple(free) == e_free and len(free) == len(e_free)
    else:
        assert type(free) is tuple and free == e_free
    assert list(index.items()) == list(e_index.items())  # same items, node order
    assert dict(buckets) == e_buckets and all(type(b) is tuple for b in buckets.values())


def _nodes(sizes):
    # names out of rank order: node order is the tuple's, not the names'
    return tuple(Node(f"m{(7 * i) % len(sizes):02d}-{i}", k) for i, k in enumerate(sizes))


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=7), data=st.data())
def test_kept_free_equals_scratch_at_every_change(sizes, data):
    nodes = _nodes(sizes)
    gpus = [g for n in nodes for g in n.gpus()]
    kept = KeptFree(nodes)
    busy: set = set()
    held = []  # views a "policy" keeps: they must never change
    check(kept.views(), scratch(nodes, busy))
    for _ in range(data.draw(st.integers(1, 40))):
        for _ in range(data.draw(st.integers(0, 4))):  # several changes between two calls
            g = data.draw(st.sampled_from(gpus))
            if g in busy:
                busy.discard(g)
                kept.give(g)
            else:
                busy.add(g)
                kept.take(g)
        v = kept.views()
        hold = data.draw(st.booleans())
        # a held view's GPUs are first read after later changes: they must be these
        check(v, scratch(nodes, busy), items=not hold)
        assert kept.views() is v  # no change: the same views
        if hold:
            held.append((v, scratch(nodes, busy)))
        for old, expect in held:
            check(old, expect)


def test_held_views_copied_not_changed():
    nodes = _nodes([4, 4, 2])
    kept = KeptFree(nodes)
    a = kept.views()
    g = nodes[0].gpus()[1]
    kept.take(g)
    b = kept.views()
    assert g in a[0] and g in a[1][nodes[0].name] and g not in b[0]
    kept.take(nodes[2].gpus()[0])
    kept.take(nodes[2].gpus()[1])  # a node leaves the index
    c = kept.views()
    assert nodes[2].name in b[1] and nodes[2].name not in c[1]
    kept.give(nodes[2].gpus()[1])  # and comes back at its place in node order
    d = kept.views()
    assert list(d[1]) == [n.name for n in nodes]
    check(d, scratch(nodes, {g, nodes[2].gpus()[0]}))


def _jobs(n=90):
    return plain_jobs(n, 5)

class Probe(PolicyProbe):
    """Checks every snapshot's free views against a build from its own GPU map."""

    def __init__(self, name, keep):
        super().__init__(name)
        self.keep, self.kept, self.calls = keep, [], 0

    def schedule(self, snap):
        self.calls += 1
        expect = scratch(snap.nodes, set(snap.gpu_jobs))
        keep = self.keep and self.calls % self.keep == 0
        # a kept snapshot's free GPUs are first read at a later call, after the simulator
        # changed its own maps: they must still be this call's
        check((snap.free_gpus, snap.free_index, snap.free_buckets), expect, items=not keep)
        if keep:
            self.kept.append((snap, expect))
        for old, e in self.kept:
            check((old.free_gpus, old.free_index, old.free_buckets), e)
        return self.inner.schedule(snap)


@pytest.mark.parametrize("name,keep", [("fifo", None), ("srtf", None), ("tiresias", 3),
                                       ("sjf-bsbf", None), ("gandiva", 2), ("afs-l", None)])
def test_simulator_free_views_at_every_call(name, keep):
    nodes = (Node("b", 8), Node("a", 4), Node("c", 2), Node("d", 8))  # names not in order
    probe = Probe(name, keep)
    res = Simulator(_jobs(), nodes, probe, MODELS, SimConfig(interval=120.0)).run()
    assert res.jobs.end.notna().all() and probe.calls > 50
