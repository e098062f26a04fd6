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
