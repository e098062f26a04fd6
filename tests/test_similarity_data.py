"""Seed 002 data: the shipped model characteristics are what the torch definitions give,
and the heterogeneous workload generator / loader behave."""
from __future__ import annotations

import csv

import pytest

from gimbalctl.cluster import parse_cluster
from gimbalctl.hetero_workload import (COLUMNS, WorkloadError, generate, jobs_from_rows,
                                       load_csv, write_csv)
from gimbalctl.similarity_db import load_features
from policies.similarity import FEATURES


@pytest.mark.parametrize("model", ["resnet18", "lm", "a3c", "efficientnetb0", "efficientnetb7",
                                   "resnet50v2", "mobilenet"])
def test_shipped_features_match_the_torch_models(model):
    pytest.importorskip("torch")
    from gimbalctl.zoo.features import measure

    got = measure(model)
    shipped = dict(zip(FEATURES, load_features()[model]))
    for k in FEATURES:
        assert got[k] == pytest.approx(shipped[k], rel=1e-4), k


def test_published_parameter_counts():
    f = {m: dict(zip(FEATURES, v)) for m, v in load_features().items()}
    assert f["resnet50"]["params_m"] == pytest.approx(25.557, rel=1e-3)  # He et al.
    assert f["bert"]["params_m"] == pytest.approx(110, rel=0.02)  # BERT-base
    assert f["vgg16"]["params_m"] > 100 and f["mobilenetv2"]["params_m"] < 4
    assert f["efficientnetb0"]["params_m"] == pytest.approx(4.020358, rel=1e-5)
    assert f["efficientnetb0"]["activation"] > f["mobilenetv2"]["activation"]  # SiLU + SE gates


# torchvision's efficientnet_b0..b7 (ImageNet head), the counts its weights' metadata gives
EFFICIENTNET_PARAMS = {0: 5_288_548, 1: 7_794_184, 2: 9_109_994, 3: 12_233_232, 4: 19_341_616,
                       5: 30_389_784, 6: 43_040_704, 7: 66_347_960}


@pytest.mark.parametrize("b", sorted(EFFICIENTNET_PARAMS))
def test_efficientnets_have_the_published_parameter_counts(b):
    """EfficientNet-B0..B7 (Tan & Le 2019; Table 2 of seed 002): compound scaling of B0
    gives exactly torchvision's parameter count of each, with the ImageNet head."""
    pytest.importorskip("torch")
    from gimbalctl.zoo.nets import efficientnet, efficientnet_b0
    net = efficientnet_b0(1000) if b == 0 else efficientnet(b, 1000)
    assert sum(p.numel() for p in net.parameters()) == EFFICIENTNET_PARAMS[b]


# Keras' applications (the paper's Table 2 models): total parameters, its BatchNorm moving
# mean and variance included
KERAS_PARAMS = {"resnet50v2": 25_613_800, "resnet101v2": 44_675_560, "resnet152v2": 60_380_648,
                "mobilenet": 4_253_864}


@pytest.mark.parametrize("model", sorted(KERAS_PARAMS))
def test_keras_built_models_have_keras_parameter_counts(model):
    torch = pytest.importorskip("torch")
    from gimbalctl.zoo.nets import mobilenet_v1, resnet_v2
    net = mobilenet_v1(1000) if model == "mobilenet" else resnet_v2(int(model[6:-2]), 1000)
    stats = sum(m.running_mean.numel() + m.running_var.numel() for m in net.modules()
                if isinstance(m, torch.nn.BatchNorm2d))
    assert sum(p.numel() for p in net.parameters()) + stats == KERAS_PARAMS[model]


# seed 002 Table 2: the 21 CNN models of the paper's jobs
PAPER_CNNS = ("vgg16", "vgg19", "resnet50", "resnet50v2", "resnet101", "resnet101v2", "resnet152",
              "resnet152v2", "mobilenet", "mobilenetv2", "densenet121", "densenet169",
              "densenet201", *(f"efficientnetb{b}" for b in range(8)))


def test_the_feature_table_holds_the_papers_21_cnns():
    f = load_features()
    assert len(PAPER_CNNS) == 21 and set(PAPER_CNNS) <= set(f)
    depth = [sum(f[f"efficientnetb{b}"][:5]) for b in range(8)]
    assert depth == sorted(depth) and depth[7] > 2 * depth[0]  # deeper with the depth coefficient


NODES = parse_cluster("1x4:v100,1x4:p100,2x4:k80")


def test_workload_is_seeded_and_round_trips(tmp_path):
    a = generate(50, NODES, span_s=420, seed=3)
    assert a == generate(50, NODES, span_s=420, seed=3)
    assert a != generate(50, NODES, span_s=420, seed=4)
    assert a[0][1] == 0 and a[-1][1] == pytest.approx(420)
    p = tmp_path / "w.csv"
    write_csv(a, p)
    jobs = load_csv(p)
    assert [j.id for j in jobs] == [r[0] for r in a]
    assert all(j.gpu_range == (1, 4) and j.batch_range == (32, 512) for j in jobs)
    assert {j.global_batch for j in jobs} <= {32, 64, 128, 256, 512}


def test_all_at_once_and_counts_follow_table2():
    rows = generate(200, NODES, span_s=0, seed=1)
    assert {r[1] for r in rows} == {0.0}
    for r in rows:
        assert 1 <= r[5] <= 4 and r[6] >= 1


def test_bad_workload_rows_name_the_line(tmp_path):
    p = tmp_path / "bad.csv"
    rows = generate(3, NODES, seed=0)
    bad = list(rows[1])
    bad[6] = "many"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows([rows[0], bad, rows[2]])
    with pytest.raises(WorkloadError, match=r"bad.csv:3"):
        load_csv(p)
    with pytest.raises(WorkloadError, match="repeated"):
        jobs_from_rows([rows[0], rows[0]])
    (tmp_path / "h.csv").write_text("a,b\n")
    with pytest.raises(WorkloadError, match="header"):
        load_csv(tmp_path / "h.csv")


def test_the_cli_trace_reader_keeps_the_ranges_of_a_workload_csv(tmp_path):
    """A §5.1 workload CSV given to ``gimbalctl simulate --trace`` (a generic trace) keeps
    each job's GPU-count and batch ranges: both trace readers give load_csv's jobs."""
    from gimbalctl.traces import load_trace
    from gimbalctl.traces_pandas import load_trace_pandas
    p = tmp_path / "w.csv"
    write_csv(generate(40, NODES, span_s=420, seed=5), p)
    want = [(j.id, j.submit_time, j.app, j.num_gpus, j.global_batch, j.gpu_range,
             j.batch_range) for j in load_csv(p)]
    for read in (load_trace, load_trace_pandas):
        jobs = read(p, nodes=NODES)
        assert [(j.id, j.submit_time, j.app, j.num_gpus, j.global_batch, j.gpu_range,
                 j.batch_range) for j in jobs] == want
        assert [j.total_iters for j in jobs] == pytest.approx([j.total_iters for j in load_csv(p)])


@pytest.mark.parametrize("body,needle", [
    ("id,submit_time,num_gpus,iterations,min_gpus\nj0,0,2,100,1\n", "min_gpus and max_gpus go together"),
    ("id,submit_time,num_gpus,iterations,min_gpus,max_gpus\nj0,0,2,100,3,2\n",
     r"w.csv:2: column 'max_gpus': max_gpus 2 is below min_gpus 3"),
    ("id,submit_time,num_gpus,iterations,min_gpus,max_gpus\nj0,0,2,100,1,2\nj1,0,8,100,1,4\n",
     r"w.csv:3: column 'min_gpus': the job's GPU count 8 is outside"),
    ("id,submit_time,num_gpus,iterations,batch_size,min_batch,max_batch\nj0,0,2,100,64,128,512\n",
     "the job's batch 64 is outside min_batch..max_batch = 128..512"),
    ("id,submit_time,num_gpus,iterations,min_batch,max_batch\nj0,0,2,100,,512\n",
     "column 'min_batch': expected a positive integer"),
])
def test_bad_ranges_in_a_trace_name_the_line(tmp_path, body, needle):
    from gimbalctl.traces import TraceError, load_trace
    from gimbalctl.traces_pandas import load_trace_pandas
    p = tmp_path / "w.csv"
    p.write_text(body)
    for read in (load_trace, load_trace_pandas):
        with pytest.raises(TraceError, match=needle):
            read(p)
