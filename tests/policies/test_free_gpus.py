"""FreeGpus (bucketed free-GPU index) picks exactly what pick_consolidated picks,
through any sequence of takes and gives."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from policies.base import FreeGpus, pick_consolidated, take_gpus
from policies.model import Gpu


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_pick_take_give_match_pick_consolidated(data):
    nodes = data.draw(st.integers(1, 12))
    per = data.draw(st.lists(st.integers(1, 8), min_size=nodes, max_size=nodes))
    names = [f"n{i:02d}" for i in range(nodes)]
    order = data.draw(st.permutations(names))  # tie-break order differs from name order
    rank = {x: i for i, x in enumerate(order)}
    by_node = {}
    for x, k in zip(names, per):
        free = tuple(Gpu(x, i) for i in range(k) if data.draw(st.booleans()))
        if free:
            by_node[x] = free
    ref = dict(by_node)
    idx = FreeGpus(dict(by_node), rank)
    held = []
    for _ in range(data.draw(st.integers(1, 25))):
        if held and data.draw(st.booleans()):
            gpus = held.pop(data.draw(st.integers(0, len(held) - 1)))
            idx.give(gpus)
            for g in gpus:
                ref[g.node] = ref.get(g.node, ()) + (g,)
            continue
        n = data.draw(st.integers(1, 20))
        want = pick_consolidated((), n, rank, ref)
        assert idx.pick(n) == want
        assert idx.total == sum(len(v) for v in ref.values())
        if want is not None:
            take_gpus(ref, want)
            idx.take(want)
            held.append(want)
        assert idx.by_node == ref


class _Check:
    """Wraps a policy: at every simulator call, the snapshot's precomputed buckets give the
    FreeGpus that building from its free GPUs gives (buckets and total)."""

    def __init__(self, name):
        import policies

        self.inner = policies.get_policy(name)
        for flag in ("preemptive", "needs_lengths", "round_length", "rounds_only", "elastic"):
            setattr(self, flag, getattr(self.inner, flag))
        self.name = self.inner.name
        self.calls = 0

    def schedule(self, snap):
        assert snap.free_buckets is not None
        fast = FreeGpus(snap.free_by_node(), snap.node_rank, snap.free_buckets)
        slow = FreeGpus(snap.free_by_node(), snap.node_rank)
        assert fast.buckets == slow.buckets and fast.total == slow.total == len(snap.free_gpus)
        self.calls += 1
        return self.inner.schedule(snap)


def test_simulator_buckets_equal_a_fresh_build_at_every_call():
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate
    from test_pack_differential import _jobs

    for name, cluster in (("fifo", "4x4"), ("tiresias", "3x8"), ("sjf-bsbf", "2x8,2x4"),
                          ("lucid+gimbal", "4x4")):
        pol = _Check(name)
        simulate(_jobs(60, seed=3), parse_cluster(cluster), pol, default_models(), SimConfig(interval=60.0, seed=1))
        assert pol.calls > 20
