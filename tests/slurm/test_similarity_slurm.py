"""Seed 002 on a real cluster with two GPU types: the daemon under ``similarity`` (decide =
gpu) places a gate job on the type its closest reference says is fastest."""
from __future__ import annotations

import json

import pytest

from tests.slurm.test_daemon_gate import gsbatch
from tests.slurm.test_daemon_ordering import Gimbal

pytestmark = pytest.mark.slurm


def _config(g: Gimbal, options: str) -> str:
    path = g.host_dir / "gimbal.toml"
    path.write_text('[daemon]\npolicy = "similarity"\nmode = "gate"\n'
                    f'[policy_options]\n{options}\n')
    return f"{g.inner}/gimbal.toml"


def test_similarity_gpu_places_a_job_on_its_fastest_gpu_type(slurm_2205_het, clean_slurm):
    c = slurm_2205_het
    # cifar10 (ResNet-18): about 6x faster on V100 than on K80 (bundled Gavel-derived speeds)
    a = gsbatch(c, "--app", "cifar10", "--batch", "128", "--gate", "--gres=gpu:1")
    g = Gimbal(c)
    cfg = _config(g, 'decide = "gpu"\ncd = false\njp = false')
    r = g("daemon", "--once", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    (start,) = [x for x in res["plan"]["actions"] if x["job_id"] == a]
    assert [gpu.split(":")[0] for gpu in start["gpus"]] == ["h2"]  # the V100 node
    c.wait_state(a, "RUNNING", timeout=30)
    assert c.show_job(a)["NodeList"] == "h2"
    why = res["plan"]["reasons"][a]
    assert why["code"] == "started" and why["numbers"]["similarity"] == pytest.approx(1.0)
    # the node types the policy saw came from the GRES types
    r = g("explain", a, "--json")
    assert r.returncode == 0, r.stderr


def test_similarity_takes_the_slower_type_when_the_fast_one_is_full(slurm_2205_het, clean_slurm):
    c = slurm_2205_het
    c.wait_state(c.submit(["--gres=gpu:2", "-w", "h2", "-J", "blocker"]), "RUNNING", timeout=30)
    a = gsbatch(c, "--app", "cifar10", "--batch", "128", "--gate", "--gres=gpu:1")
    g = Gimbal(c)
    cfg = _config(g, 'decide = "gpu"\ncd = false\njp = false')
    r = g("daemon", "--once", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    c.wait_state(a, "RUNNING", timeout=30)
    assert c.show_job(a)["NodeList"] == "h1"  # the K80 node: Alg. 2 takes the next suggestion
