"""Hand-built snapshots for the SJF-BSBF / SJF-FFS unit tests."""
from __future__ import annotations

from types import MappingProxyType

from policies.model import Allocation, ClusterSnapshot, Gpu, Job, JobState, Node
from policies.throughput import InterferenceTable, MemoryProfile, ThroughputProfile

# "x": light model; "big": memory-hungry model (14240 MiB at its max batch 256)
PROFILES = {
    "x": ThroughputProfile("x", 0.05, 0.002, 0.01, 0.005, 0.05, 0.01, 1.0, 256),
    "big": ThroughputProfile("big", 0.10, 0.004, 0.02, 0.01, 0.10, 0.02, 1.0, 256),
}
MEMORY = {
    "x": MemoryProfile("x", 1000.0, 20.0),
    "big": MemoryProfile("big", 4000.0, 40.0),
}
MEM_MB = 16384


def running(jid, app, gpus, sub_batch=None, accum=1, total=1e6, done=0.0, batch=None,
            submit=0.0):
    """A running job on ``gpus`` (list of (node_index, gpu_index))."""
    g = tuple(Gpu(f"n{n}", i) for n, i in gpus)
    batch = batch if batch is not None else 64 * len(g)
    sb = sub_batch if sub_batch is not None else -(-batch // len(g))
    return Job(id=jid, submit_time=submit, num_gpus=len(g), app=app, global_batch=batch,
               total_iters=float(total), state=JobState.RUNNING,
               allocation=Allocation(g, sb, accum), start_time=submit, as_of=0.0,
               completed_iters=float(done), iter_rate=0.0)


def pending(jid, app, num_gpus, total=1000.0, batch=None, submit=0.0):
    batch = batch if batch is not None else 64 * num_gpus
    return Job(id=jid, submit_time=submit, num_gpus=num_gpus, app=app, global_batch=batch,
               total_iters=float(total))


def make_snap(jobs, nodes=1, gpus_per_node=4, xi_default=1.5, pairs=None, override=None,
              mem_mb=MEM_MB, now=0.0, max_jobs_per_gpu=2):
    node_objs = tuple(Node(f"n{i}", gpus_per_node, gpu_mem_mb=mem_mb) for i in range(nodes))
    gpu_jobs: dict[Gpu, tuple[str, ...]] = {}
    for j in jobs:
        if j.running:
            for g in j.allocation.gpus:
                gpu_jobs[g] = gpu_jobs.get(g, ()) + (j.id,)
    free = tuple(g for n in node_objs for g in n.gpus() if g not in gpu_jobs)
    table = InterferenceTable(MappingProxyType(dict(pairs or {})), xi_default, override)
    return ClusterSnapshot(now=now, nodes=node_objs, jobs=MappingProxyType({j.id: j for j in jobs}),
                           gpu_jobs=MappingProxyType(gpu_jobs), free_gpus=free,
                           profiles=MappingProxyType(PROFILES), memory=MappingProxyType(MEMORY),
                           interference=table, max_jobs_per_gpu=max_jobs_per_gpu)
