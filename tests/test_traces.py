import numpy as np
import pytest

from gimbalctl.cli import bundled_trace
from gimbalctl.profiles import default_models
from gimbalctl.traces import TraceError, load_trace

M = default_models()


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bundled_pollux_workload():
    jobs = load_trace(bundled_trace())
    assert len(jobs) == 160
    j = next(j for j in jobs if j.id == "cifar10-0")
    assert (j.num_gpus, j.global_batch, j.app, j.submit_time) == (6, 2048, "cifar10", 107.0)
    # Pollux's validation profile: cifar10 at batch 2048 reaches its target at iteration 3178
    assert j.total_iters == pytest.approx(3178, rel=1e-6)
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)


def test_iterations_interpolate_between_profiles():
    a, b = M.iterations_for("cifar10", 1024), M.iterations_for("cifar10", 2048)
    mid = M.iterations_for("cifar10", 1448)
    assert b < mid < a


def test_philly_lengths_match_duration(tmp_path):
    p = write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                        "2017-10-09 07:01:55,600.0,1,600.0,a\n"
                        "2017-10-09 06:13:03,3600,8,28800,b\n")
    jobs = load_trace(p, seed=3)
    assert [j.submit_time for j in jobs] == [0.0, 2932.0]
    for j, dur in zip(jobs, (3600, 600)):
        prof = M.profiles[j.app]
        s = prof.min_accum_steps(j.global_batch / j.num_gpus)
        t = prof.iter_time(j.global_batch / j.num_gpus, j.num_gpus, -(-j.num_gpus // 4), s)
        assert j.total_iters * t == pytest.approx(dur, rel=1e-9)
    # seeded: same seed same apps; the draw is in submit order
    assert [j.app for j in load_trace(p, seed=3)] == [j.app for j in jobs]


def test_seed_changes_assignment(tmp_path):
    rows = "".join(f"2017-10-09 07:{i:02d}:00,100,1,100,a\n" for i in range(40))
    p = write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n" + rows)
    a = [j.app for j in load_trace(p, seed=1)]
    b = [j.app for j in load_trace(p, seed=2)]
    assert a != b and len(set(a)) > 2


def test_tiresias_and_muri_units(tmp_path):
    p = write(tmp_path, "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                        "0,1,0,606,vgg19,164,30\n1,8,30,133,bert,147,23\n")
    jobs = load_trace(p)
    assert [j.app for j in jobs] == ["imagenet", "bert"]
    assert jobs[1].submit_time == 30.0
    q = write(tmp_path, "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,"
                        "interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,"
                        "priority\n0,1,0,5,dqn,128,2000,0,4,1,1,0,1\n1,2,5000,5,dqn,128,4000,0,4,1,1,0,1\n",
              "m.csv")
    jobs = load_trace(q)
    assert [j.submit_time for j in jobs] == [0.0, 5.0]  # milliseconds


def test_generic_with_mapping_and_deadline(tmp_path):
    p = write(tmp_path, "jid,t,gpus,iterations,app,deadline\nx,10,2,500,bert,5000\ny,20,1,50,ncf,\n")
    jobs = load_trace(p, kind="generic", columns={"jid": "id", "t": "submit_time", "gpus": "num_gpus"})
    assert [(j.id, j.app, j.total_iters, j.deadline) for j in jobs] == [
        ("x", "bert", 500.0, 4990.0), ("y", "ncf", 50.0, None)]


@pytest.mark.parametrize("text,where", [
    ("name,time,application,num_replicas,batch_size\na,1,cifar10,2,128\nb,2,cifar10,-1,128\n",
     ":3: column 'num_replicas'"),
    ("name,time,application,num_replicas,batch_size\na,x,cifar10,2,128\n", ":2: column 'time'"),
    ("name,time,application,num_replicas,batch_size\na,1,gpt9,2,128\n", ":2: column 'application'"),
    ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-13-45 00:00:00,5,1,5,a\n",
     ":2: column 'timestamp'"),
    ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,5,1.5,5,a\n",
     ":2: column 'num_gpus'"),
    ("foo,bar\n1,2\n", ":1: unrecognised trace header"),
    ("id,submit_time,num_gpus\n", "no jobs"),
])
def test_malformed_names_file_line_column(tmp_path, text, where):
    p = write(tmp_path, text)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(p) in str(e.value) and where in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="file not found"):
        load_trace(tmp_path / "nope.csv")


SACCT = """JobID|User|Submit|Start|End|State|AllocTRES|Comment|AdminComment
101|alice|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T11:05:00|COMPLETED|billing=4,cpu=4,gres/gpu=4,mem=16G,node=1|gimbal:app=bert,batch=48|
101.batch|alice|2024-03-01T10:05:00|2024-03-01T10:05:00|2024-03-01T11:05:00|COMPLETED|cpu=4,gres/gpu=4,mem=16G,node=1||
102|bob|2024-03-01T10:01:00|2024-03-01T10:02:00|2024-03-01T10:12:00|FAILED|cpu=1,gres/gpu:a100=1,mem=4G,node=1||gimbal:v1;app=ncf;batch=256
103|bob|2024-03-01T10:02:00|Unknown|Unknown|CANCELLED|||
104|carol|2024-03-01T10:03:00|2024-03-01T10:03:00|2024-03-01T10:33:00|COMPLETED|cpu=8,mem=8G,node=1||
"""


def test_sacct_history(tmp_path):
    p = write(tmp_path, SACCT, "sacct.txt")
    jobs = load_trace(p)
    assert [(j.id, j.user, j.num_gpus, j.app, j.global_batch, j.submit_time) for j in jobs] == [
        ("101", "alice", 4, "bert", 48, 0.0), ("102", "bob", 1, "ncf", 256, 60.0)]
    j = jobs[0]
    prof = M.profiles["bert"]
    s = prof.min_accum_steps(12)
    assert j.total_iters * prof.iter_time(12, 4, 1, s) == pytest.approx(3600)


def test_sacct_bad_time(tmp_path):
    p = write(tmp_path, "JobID|Submit|Start|End|AllocTRES\n1|yesterday|x|y|gres/gpu=1\n", "s.txt")
    with pytest.raises(TraceError, match=r":2: column 'Submit'"):
        load_trace(p)


POLLUX_HEAD = "name,time,application,num_replicas,batch_size\n"


@pytest.mark.parametrize("text,where", [
    # the same id twice: the simulator keys on ids, so the loader names the row
    (POLLUX_HEAD + "a,1,cifar10,2,128\na,2,cifar10,2,128\n",
     ":3: column 'name': duplicate job id 'a'"),
    ("id,submit_time,num_gpus,duration\n,0,1,100\n", ":2: column 'id': empty job id"),
    # pandas skips blank lines; the error must still name the file's own line
    (POLLUX_HEAD + "a,1,cifar10,2,128\n\n\nb,x,cifar10,2,128\n", ":5: column 'time'"),
    ("\n" + POLLUX_HEAD + "a,1,cifar10,2,128\n\nb,2,cifar10,0,128\n", ":5: column 'num_replicas'"),
    # one field too many on the first row was read as an index column, shifting
    # every column ("time: got 'cifar10'")
    (POLLUX_HEAD + "a,1,cifar10,2,128,9\n", ":2: more fields than the header"),
    # a deadline that is not a number was dropped silently
    ("id,submit_time,num_gpus,duration,deadline\na,0,1,100,\nb,0,1,100,soon\n",
     ":3: column 'deadline': expected a number or nothing, got 'soon'"),
])
def test_malformed_rows_named_exactly(tmp_path, text, where):
    p = write(tmp_path, text)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(p) in str(e.value) and where in str(e.value)


def test_generic_deadline_optional_per_row(tmp_path):
    p = write(tmp_path, "id,submit_time,num_gpus,duration,deadline\na,10,1,100,\nb,10,1,100,500\n")
    jobs = {j.id: j for j in load_trace(p)}
    assert jobs["a"].deadline is None and jobs["b"].deadline == 490.0


@pytest.mark.parametrize("cluster", ["16x4", "8x8", "4x8", "2x8:gpu:8000"])
def test_job_alone_runs_its_trace_duration_on_any_node_shape(tmp_path, cluster):
    """A trace's duration is converted on the simulated cluster's own node shape and
    memory: every job, alone on the idle cluster, takes its duration (within 1 %)."""
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import APPS
    from gimbalctl.sim import SimConfig, simulate
    from gimbalctl.traces import BASE_BATCH
    from policies import get_policy

    nodes = parse_cluster(cluster)
    total = sum(n.num_gpus for n in nodes)
    rng = np.random.default_rng(7)
    rows = ["id,submit_time,num_gpus,duration,app,batch_size"]
    sizes = [g for g in (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32) if g <= total]
    k = 0
    for g in sizes:
        for app in APPS:
            dur = float(rng.uniform(120, 50000))
            # every other job asks for a batch that needs accumulation steps
            top = int(default_models().iters_table[app][-1][0])
            batch = min(BASE_BATCH[app] * g, top) if k % 2 else top
            rows.append(f"j{k},{k * 1e6},{g},{dur:.3f},{app},{batch}")
            k += 1
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    jobs = load_trace(path, kind="generic", nodes=nodes)
    want = {f"j{i}": float(r.split(",")[3]) for i, r in enumerate(rows[1:])}
    res = simulate(jobs, nodes, get_policy("fifo"), default_models(), SimConfig())
    df = res.jobs.set_index("id")
    assert (df.queueing == 0).all(), "each job ran alone"
    ratio = (df.end - df.start) / df.index.map(want)
    assert ratio.between(0.99, 1.01).all(), ratio[~ratio.between(0.99, 1.01)].to_dict()
