"""A test's stand-in for a registered policy: it declares what the policy declares (the
attributes the simulator and daemon read), so a subclass can wrap ``schedule`` with checks
and hand the call on to ``self.inner``."""
from __future__ import annotations

import policies

# what the simulator reads of a policy besides ``schedule``
DECLARED = ("name", "preemptive", "elastic", "needs_lengths", "round_length", "rounds_only")


class PolicyProbe:
    def __init__(self, name: str):
        self.inner = policies.get_policy(name)
        for a in DECLARED:
            setattr(self, a, getattr(self.inner, a))

    def schedule(self, snap):
        return self.inner.schedule(snap)


class Recorder(PolicyProbe):
    """A probe that keeps every snapshot it is handed (``seen``), oldest first."""

    def __init__(self, name: str):
        super().__init__(name)
        self.seen: list = []

    def schedule(self, snap):
        self.seen.append(snap)
        return self.inner.schedule(snap)
