"""Fixture replay helpers: a CliBackend whose commands answer from tests/fixtures/slurm/<release>/."""
import subprocess
from pathlib import Path


FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RELEASES = ("22.05", "26.05")


class Replay:
    """Runner answering reads from recorded files and logging mutations."""

    def __init__(self, release: str, fail_update: bool = False):
        self.dir = FIX / release
        self.calls: list[tuple] = []
        self.fail_update = fail_update

    def __call__(self, argv, timeout):
        argv = tuple(argv)
        self.calls.append(argv)
        out = None
        if argv[:2] == ("sinfo", "-V"):
            out = (self.dir / "sinfo-V.txt").read_text()
        elif argv[:2] == ("squeue", "--json"):
            out = (self.dir / "squeue.json").read_text()
        elif argv in (("sinfo", "--json"), ("scontrol", "--json", "show", "nodes")):
            out = (self.dir / "nodes.json").read_text()
        elif argv[:3] == ("scontrol", "show", "config"):
            out = "Configuration data as of 2026-11-22T00:00:00\nClusterName             = gimbal\n"
        elif argv[0] == "sprio":
            out = (self.dir / "sprio.txt").read_text()
        elif argv[0] in ("scontrol", "scancel"):
            if self.fail_update:
                return subprocess.CompletedProcess(argv, 1, "", "Invalid generic resource (gres) specification")
            out = ""
        if out is None:
            raise AssertionError(f"unexpected command {argv}")
        return subprocess.CompletedProcess(argv, 0, out, "")

    def mutations(self):
        return [c for c in self.calls if c[0] in ("scancel",) or c[:2] in (
            ("scontrol", "update"), ("scontrol", "hold"), ("scontrol", "release"),
            ("scontrol", "requeuehold"))]


def jobs_of(release):
    """Job ids of the recorded scenario (README.txt) by role."""
    text = (FIX / release / "README.txt").read_text().split("jobs:", 1)[1]
    out = {}
    for part in text.replace(" p=", " p=").split():
        if "=" in part:
            k, v = part.split("=")
            out[k] = v
            last = k
        else:
            out[last] = out[last] + " " + part
    out["p"] = out["p"].split()
    return out


