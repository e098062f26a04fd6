"""Pure scheduling logic: snapshot in, Plan out.  No I/O, no clock, no Slurm."""
from .model import Allocation, ClusterSnapshot, Gpu, Job, JobState, Node
from .plan import Plan, PreemptJob, Reason, ReasonCode, ResizeJob, StartJob
from .registry import UnknownPolicyError, describe, get_policy, names
from .throughput import InterferenceTable, MemoryProfile, ThroughputProfile

__all__ = [
    "Allocation", "ClusterSnapshot", "Gpu", "Job", "JobState", "Node", "Plan",
    "PreemptJob", "Reason", "ReasonCode", "ResizeJob", "StartJob",
    "UnknownPolicyError", "describe", "get_policy", "names", "InterferenceTable",
    "MemoryProfile", "ThroughputProfile",
]
