"""Interference by co-location mechanism and MPS split (policies.throughput.MpsInterference),
fitted to the bundled H100 table (gimbalctl/data/traces/h100-mps) by gimbalctl.profiles.fit_mps.

Tolerances (stated in docs/interference.md): every measured MPS pair value within 20 %,
median within 6 %; every solo value within 7 %; time-slicing within 12 %.  The two H100
runs behind the table agree within 2.3 % on pairs but the no-MPS baselines of the
launch-bound models moved 6-18 % between runs (SOURCES.md), which bounds what a fit can do."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gimbalctl.profiles import H100_DIR, default_models, fit_mps, mps_model_from_dict
from policies.throughput import InterferenceTable, MpsInterference

SOLO = pd.read_csv(H100_DIR / "solo.csv")
PAIRS = pd.read_csv(H100_DIR / "pairs.csv")
M = default_models()
MPS = M.interference.mps
MODELS = sorted(set(SOLO.model))
POLLUX = sorted(M.profiles)


def _pct(v):
    return None if pd.isna(v) else int(v)


def test_bundled_parameters_are_what_the_fit_gives():
    fresh = mps_model_from_dict(fit_mps(SOLO, PAIRS))
    for m in [*MODELS, "*"]:
        for k, v in MPS.apps[m].items():
            assert fresh.apps[m][k] == pytest.approx(v, rel=1e-3, abs=1e-3), (m, k)
    assert fresh.gamma == pytest.approx(MPS.gamma, rel=1e-3)


def test_fit_reproduces_measured_mps_pairs():
    errs = []
    for r in PAIRS[PAIRS["mode"] == "mps"].itertuples():
        for a, b, pa, pb, x in ((r.model_a, r.model_b, r.pct_a, r.pct_b, r.xi_a),
                                (r.model_b, r.model_a, r.pct_b, r.pct_a, r.xi_b)):
            got = M.interference.ratio(a, b, _pct(pa), _pct(pb))
            errs.append(abs(got / x - 1))
            assert got == pytest.approx(x, rel=0.20), (a, b, pa, pb)
    assert len(errs) == 64 and float(np.median(errs)) <= 0.06


def test_fit_reproduces_solo_slowdown_under_mps_limits():
    base = {r.model: r.iter_ms for r in SOLO[SOLO.mps_pct.isna()].itertuples()}
    for r in SOLO[SOLO.mps_pct.notna()].itertuples():
        want = r.iter_ms / base[r.model]
        assert M.interference.mps_alone(r.model, int(r.mps_pct)) == pytest.approx(want, rel=0.07), r


def test_timeslice_fit_and_gpu_md_facts():
    """shared/notes/gpu.md: plain time-slicing gives ξ ≈ 2 whatever the pair (combined
    progress 1/ξa + 1/ξb between 0.92 and 1.25 over the sweep)."""
    for r in PAIRS[PAIRS["mode"] == "no_mps"].itertuples():
        xa, xb = MPS.timeslice(r.model_a, r.model_b), MPS.timeslice(r.model_b, r.model_a)
        assert xa == pytest.approx(r.xi_a, rel=0.12) and xb == pytest.approx(r.xi_b, rel=0.12)
        assert 0.9 <= 1 / xa + 1 / xb <= 1.3
    for m in MODELS:
        assert 1.5 <= MPS.timeslice(m, m) <= 2.3


def test_mps_100_100_matches_gpu_md_facts():
    """gpu.md §5: at MPS 100/100 ξ is below 2 for 6 of the 8 measured pairs; the light job
    beside VGG-16 is starved (LSTM 3.02, TinyLM 2.33)."""
    pairs = {(r.model_a, r.model_b) for r in PAIRS.itertuples()}
    below = [p for p in pairs if max(MPS.xi(p[0], p[1], 100, 100), MPS.xi(p[1], p[0], 100, 100)) < 2]
    assert len(pairs) == 8 and len(below) == 6
    assert MPS.xi("lstm", "vgg16", 100, 100) > 2.5 and MPS.xi("tinylm", "vgg16", 100, 100) > 2.0
    assert MPS.xi("vgg16", "lstm", 100, 100) < 1.3


# gpu.md §2: a separate, earlier H100 run (ResNet-18 b64 "R", 6-layer d512 Transformer
# b32 "T" = TinyLM); not part of the fitted table, so a held-out check.
GPU_MD_TABLE = [  # (a, b, pct_a, pct_b, measured xi of a)
    ("resnet18", "resnet18", 100, 100, 1.57), ("tinylm", "tinylm", 100, 100, 1.75),
    ("resnet18", "tinylm", 100, 100, 1.81), ("tinylm", "resnet18", 100, 100, 1.52),
    ("resnet18", "resnet18", 50, 50, 1.66), ("tinylm", "tinylm", 50, 50, 2.03),
    ("resnet18", "tinylm", 50, 50, 1.55), ("tinylm", "resnet18", 50, 50, 2.10),
    ("resnet18", "tinylm", 30, 70, 2.19), ("tinylm", "resnet18", 70, 30, 1.56),
    ("resnet18", "tinylm", 70, 30, 1.24), ("tinylm", "resnet18", 30, 70, 3.70),
]


@pytest.mark.parametrize("a,b,pa,pb,xi", GPU_MD_TABLE)
def test_held_out_gpu_md_table(a, b, pa, pb, xi):
    assert MPS.xi(a, b, pa, pb) == pytest.approx(xi, rel=0.15)


@pytest.mark.parametrize("app", [*MODELS, *POLLUX, "never-measured"])
def test_monotonic_in_own_and_partner_share(app):
    grid = list(range(10, 101, 10))
    for other in ("resnet18", "vgg16", "bert", "never-measured"):
        for pb in (30, 50, 100):
            xs = [MPS.xi(app, other, p, pb) for p in grid]
            assert all(x2 <= x1 + 1e-12 for x1, x2 in zip(xs, xs[1:])), (app, other, pb)
            assert min(xs) >= 1.0
        for pa in (30, 100):
            ys = [MPS.xi(app, other, pa, p) for p in grid]
            assert all(y2 >= y1 - 1e-12 for y1, y2 in zip(ys, ys[1:])), (app, other, pa)
    alone = [MPS.alone(app, p) for p in grid]
    assert all(b <= a + 1e-12 for a, b in zip(alone, alone[1:]))
    assert alone[-1] == pytest.approx(1.0) and MPS.alone(app, None) == 1.0


def test_table_semantics_by_mechanism():
    t = M.interference
    # no shares: time-slicing, the Gavel per-pair table (V100)
    assert t.ratio("cifar10", "ncf") == t.pairs[("cifar10", "ncf")]
    # shares given: the H100 MPS model through the Pollux alias (cifar10 -> resnet18)
    assert t.ratio("cifar10", "yolov3", 50, 50) == pytest.approx(MPS.xi("resnet18", "vgg16", 50, 50))
    assert t.ratio("cifar10", "ncf", 70, None) == pytest.approx(MPS.xi("resnet18", "lstm", 70, 100))
    # an application never measured uses the mean parameters
    assert MPS.params("never-measured") is MPS.apps["*"]
    # mechanism="mps": co-location without shares is MPS at 100/100
    m = M.with_interference(mechanism="mps")
    assert m.interference.ratio("bert", "bert") == pytest.approx(MPS.xi("tinylm", "tinylm", 100, 100))
    # H100 time-slicing table: one value per model, any partner
    h = M.with_interference(timeslice="h100")
    assert h.interference.ratio("imagenet", "bert") == pytest.approx(MPS.timeslice("resnet50", "x"), abs=1e-3)
    assert h.interference.ratio("imagenet", "ncf") == h.interference.ratio("imagenet", "bert")
    # --xi override replaces every co-located ξ, MPS or not; mps_alone is untouched
    o = M.with_xi(1.3).interference
    assert o.ratio("bert", "ncf") == 1.3 and o.ratio("bert", "ncf", 30, 70) == 1.3
    assert o.mps_alone("bert", 30) == pytest.approx(MPS.alone("tinylm", 30))
    with pytest.raises(ValueError, match="mechanism"):
        InterferenceTable(mechanism="nvlink")
    with pytest.raises(ValueError, match="timeslice source"):
        M.with_interference(timeslice="a100")


def test_table_without_mps_model_keeps_the_old_behaviour():
    t = InterferenceTable({("a", "b"): 1.7}, 1.5)
    assert t.ratio("a", "b") == 1.7 and t.ratio("a", "b", 50, 50) == 1.7
    assert t.ratio("x", "y") == 1.5 and t.mps_alone("a", 25) == 4.0 and t.mps_alone("a", None) == 1.0


def test_mps_model_is_pure_data():
    assert isinstance(MPS, MpsInterference)
    with pytest.raises(TypeError):
        MPS.apps["lstm"]["c"] = 0.0  # read-only mappings
    assert math.isfinite(MPS.xi("lstm", "lstm", 10, 100))


def test_snapshot_exposes_the_model_to_policies():
    from policies.model import ClusterSnapshot
    snap = ClusterSnapshot(now=0.0, nodes=(), jobs={}, gpu_jobs={}, free_gpus=(),
                           interference=M.interference)
    assert snap.xi("bert", "ncf") == M.interference.pairs[("bert", "ncf")]
    assert snap.xi("bert", "ncf", 70, 30) == pytest.approx(MPS.xi("tinylm", "lstm", 70, 30))
    assert snap.mps_alone("bert", 50) == pytest.approx(MPS.alone("tinylm", 50))


def test_simulator_uses_the_bundled_mps_model():
    """The same script as the contract test, with the bundled (fitted H100) model: a
    cifar10 job at MPS 70 % shares a GPU with one at 30 %, then runs alone under its cap."""
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.sim import simulate
    from policies.base import Policy
    from policies.model import Gpu, Job
    from policies.plan import StartJob, make_plan

    g = Gpu("n0000", 0)

    class Two(Policy):
        name = "two-mps"

        def schedule(self, snap):
            acts = [StartJob(j.id, (g,), 128, share_with=tuple(snap.gpu_jobs.get(g, ())),
                             mps_pct=70 if j.id == "j0" else 30) for j in snap.pending()]
            return make_plan(self.name, acts, [], {})

    jobs = [Job(id=f"j{i}", submit_time=0.0, num_gpus=1, app="cifar10", global_batch=128,
                total_iters=n) for i, n in ((0, 1000), (1, 100))]
    res = simulate(jobs, parse_cluster("1x1"), Two(), M)
    df = res.jobs.set_index("id")
    t = M.profiles["cifar10"].iter_time(128, 1, 1)
    xi1 = MPS.xi("resnet18", "resnet18", 30, 70)  # cifar10 -> resnet18
    xi0 = MPS.xi("resnet18", "resnet18", 70, 30)
    t1 = 100 * t * xi1
    assert df.loc["j1", "jct"] == pytest.approx(t1)
    done0 = t1 / (t * xi0)
    alone = MPS.alone("resnet18", 70)
    assert df.loc["j0", "jct"] == pytest.approx(t1 + (1000 - done0) * t * alone)
    assert xi1 > xi0 > alone > 1.0  # the 30 % job suffers most; sharing costs more than the cap
