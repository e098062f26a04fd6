"""Verbatim copy of ``Simulator._sample``'s sums as they were before the kept waiting
order (issue #13): one loop over every active job per sample.  The test in
tests/test_sim_snapshot_sharing.py checks the timeline against it at every sample."""
from __future__ import annotations

from gimbalctl.sim.engine import EPS
from policies.model import JobState


def sample(self) -> tuple:
    """(QL, CE, BI, GPU use) at ``self.now``, as the old ``_sample`` computed them."""
    ce = 0.0
    bi_sum, n_wait = 0.0, 0
    for rec in self.active.values():
        one = self._one_gpu_rate(rec.spec)
        if rec.state is JobState.RUNNING:
            if self.now - rec.as_of >= rec.overhead:  # restoring: no throughput yet
                ce += rec.rate / one
        else:
            n_wait += 1
            left = rec.spec.total_iters - rec.done_iters
            pending = self.now - (rec.as_of if rec.preemptions else rec.spec.submit_time)
            bi_sum += pending / max(left / one, EPS)
    return (n_wait, ce / max(self.total_gpus, 1), bi_sum / n_wait if n_wait else 0.0,
            self.busy_gpus / max(self.total_gpus, 1))
