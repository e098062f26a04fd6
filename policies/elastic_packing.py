"""Network packing's allowed shares (seed 001 §4.4, Appendix E), shared by
:func:`policies.elastic.regulate` and :mod:`policies.elastic_regulate`: a share must be a
power of two dividing the GPUs per node, or a multiple of the GPUs per node."""
from __future__ import annotations

def packing_shares(per_node: int, total: int) -> tuple[int, ...]:
    """Allowed shares (§4.4): powers of two dividing ``per_node``, then multiples of it."""
    small = [1 << e for e in range(per_node.bit_length()) if per_node % (1 << e) == 0
             and (1 << e) < per_node]
    return tuple(small + list(range(per_node, total + 1, per_node)))


def allowed(share: int, per_node: int) -> bool:
    if share <= 0:
        return share == 0
    if share >= per_node:
        return share % per_node == 0
    return per_node % share == 0 and share & (share - 1) == 0


def round_down(share: int, per_node: int) -> int:
    """Appendix E's ``x_i``: the largest allowed share not above ``share``."""
    if share <= 0:
        return 0
    if share >= per_node:
        return share // per_node * per_node
    x = 1 << (share.bit_length() - 1)
    while per_node % x:
        x >>= 1
    return x


def next_up(r: int, per_node: int) -> int:
    """Appendix E's moves: ``2^l -> 2^(l+1)`` below a node, ``+per_node`` above."""
    if r >= per_node:
        return r + per_node
    up = r * 2
    while up < per_node and per_node % up:
        up *= 2
    return up if up <= per_node and allowed(up, per_node) else per_node
