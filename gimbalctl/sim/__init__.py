"""In-process trace-driven simulator (same policy objects and snapshot type as the daemon)."""
from .engine import PlanError, SimConfig, Simulator, simulate
from .result import SimResult

__all__ = ["PlanError", "SimConfig", "SimResult", "Simulator", "simulate"]
