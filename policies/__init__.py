"""Pure scheduling logic: snapshot in, Plan out.  No I/O, no clock, no Slurm."""
from .model import (Allocation, ClusterSnapshot, FinishedJob, Gpu, Job, JobState, Node,
                    WorkerAlloc, uniform_workers)
from .plan import Plan, PreemptJob, Reason, ReasonCode, ResizeJob, StartJob
from .registry import UnknownPolicyError, describe, get_policy, names
from .throughput import GpuTypeTable, InterferenceTable, MemoryProfile, ThroughputProfile

__all__ = [
    "Allocation", "ClusterSnapshot", "FinishedJob", "Gpu", "GpuTypeTable", "WorkerAlloc",
    "uniform_workers", "Job", "JobState", "Node", "Plan",
    "PreemptJob", "Reason", "ReasonCode", "ResizeJob", "StartJob",
    "UnknownPolicyError", "describe", "get_policy", "names", "InterferenceTable",
    "MemoryProfile", "ThroughputProfile",
]
