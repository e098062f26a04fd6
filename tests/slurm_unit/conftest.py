"""Fixtures for the Slurm unit tests (recorded output, no cluster)."""
import pytest

from tests.slurm_unit.replay import RELEASES, Replay
from gimbalctl.slurm.cli import CliBackend


@pytest.fixture(params=RELEASES)
def release(request):
    return request.param


@pytest.fixture
def replay(release):
    r = Replay(release)
    return r, CliBackend(runner=r, partition="gpu")
