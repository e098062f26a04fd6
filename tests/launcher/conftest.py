import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
if REPO not in sys.path:
    sys.path.insert(0, REPO)


@pytest.fixture
def slurm_env_2node():
    with open(os.path.join(FIXTURES, "slurm_env_2node.json")) as fh:
        env = json.load(fh)
    env.pop("_comment", None)
    return env


