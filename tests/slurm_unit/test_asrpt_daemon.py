"""A-SRPT in the daemon (seed 003 §IV-C on a Slurm site): the predictor is fitted on the
site's sacct history ([predictor] sacct), the pending jobs are ordered by Ã1 on the predicted
lengths, not the users' time limits, and the reasons name the prediction and its source
(recorded 22.05/26.05 state; no live cluster)."""
from __future__ import annotations

from gimbalctl.config import Config, load
from gimbalctl.daemon import run_cycle
from gimbalctl.store import Store
from policies.registry import get_policy

from tests.slurm_unit.replay import jobs_of

NOW = 1_800_000_000.0
HEAD = "JobID|JobName|User|Submit|Start|End|AllocTRES|Comment|AdminComment\n"


def sacct(tmp_path):
    """Recurring runs of the fixture's pending job names by root (4 GPUs, imagenet batch
    256): the history contradicts the time limits (p40 runs 5 min, p10 50 min); bob runs
    the same names for hours (another user: other groups)."""
    rows, i = [], 0
    mins = {("root", "p40"): 5, ("root", "p30"): 15, ("root", "p20"): 30, ("root", "p10"): 50,
            ("bob", "p40"): 600, ("bob", "p10"): 600}
    for rep in range(6):
        for (user, name), m in mins.items():
            i += 1
            day = 1 + i // 20
            start = f"2026-01-{day:02d}T{i % 20:02d}:00:00"
            end = f"2026-01-{day:02d}T{i % 20 + m // 60:02d}:{m % 60:02d}:{rep:02d}"
            rows.append(f"{1000 + i}|{name}|{user}|{start}|{start}|{end}|cpu=4,gres/gpu=4|"
                        "gimbal:app=imagenet,batch=256|")
    p = tmp_path / "sacct.txt"
    p.write_text(HEAD + "\n".join(rows) + "\n")
    return p


def cycle(tmp_path, be, cfg):
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    return run_cycle(cfg, be, st, get_policy("a-srpt"), dry_run=True, now=NOW)


def order_of(res, release):
    ids = jobs_of(release)
    name = {ids["p"][0]: "p40", ids["p"][1]: "p10", ids["p"][2]: "p30", ids["p"][3]: "p20"}
    return [name[j] for j in res.queue if j in name]  # started now first, then plan.order


def test_daemon_orders_by_predicted_length_from_sacct(release, replay, tmp_path):
    _, be = replay
    state = str(tmp_path / "state")
    plain = cycle(tmp_path, be, Config(policy="a-srpt", state_dir=state))
    assert order_of(plain, release) == ["p10", "p20", "p30", "p40"]  # time limits
    cfg = Config(policy="a-srpt", state_dir=state, predictor_sacct=str(sacct(tmp_path)))
    res = cycle(tmp_path, be, cfg)
    assert order_of(res, release) == ["p40", "p30", "p20", "p10"]  # the site's history
    p10 = jobs_of(release)["p"][1]
    r = res.plan.reasons[p10]
    assert "(rf)" in r.text and r.numbers["predicted"] > 2000  # ~50 min, in seconds
    assert r.numbers["virtual_pos"] >= 3


def test_bad_sacct_file_is_a_warning_not_a_failed_cycle(release, replay, tmp_path):
    _, be = replay
    bad = tmp_path / "bad.txt"
    bad.write_text("JobID|User\n1|x\n")
    res = cycle(tmp_path, be, Config(policy="a-srpt", state_dir=str(tmp_path / "s"),
                                     predictor_sacct=str(bad)))
    assert any("predictor" in w and "bad.txt" in w for w in res.warnings)
    assert order_of(res, release) == ["p10", "p20", "p30", "p40"]


def test_predictor_config_keys(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('[predictor]\nsacct = "/x/sacct.txt"\nkind = "median"\nrefit = 600\n')
    cfg = load(str(p))
    assert (cfg.predictor_sacct, cfg.predictor_kind, cfg.predictor_refit) == ("/x/sacct.txt", "median", 600.0)
    p.write_text('[predictor]\nkind = "svm"\n')
    import pytest
    from gimbalctl.config import ConfigError
    with pytest.raises(ConfigError, match="predictor.kind"):
        load(str(p))


def sacct_json(release):
    """The sacct --json history of the fixture's pending names through the backend: root ran
    p40 in 5 min, p30 15, p20 30, p10 50 (4 GPUs, imagenet batch 256), three times each;
    bob ran p40 for 10 h (another group).  Records are the recorded sacct job reshaped."""
    import copy
    import json
    from tests.slurm_unit.replay import FIX
    base = json.loads((FIX / release / "sacct.json").read_text(), strict=False)
    tmpl = next(j for j in base["jobs"] if j["job_id"] == 5)
    jobs, jid = [], 100
    for rep in range(3):
        for user, name, mins in (("root", "p40", 5), ("root", "p30", 15), ("root", "p20", 30),
                                 ("root", "p10", 50), ("bob", "p40", 600)):
            j = copy.deepcopy(tmpl)
            jid += 1
            t0 = 1_700_000_000 + jid * 10_000
            j.update(job_id=jid, name=name, user=user)
            j["time"].update(submission=t0, start=t0, end=t0 + mins * 60 + rep)
            j["tres"]["allocated"] = [{"type": "gres", "name": "gpu", "id": 1001, "count": 4}]
            j["comment"] = {"administrator": "gimbal:v1;app=imagenet;batch=256", "job": "",
                            "system": None}
            jobs.append(j)
    base["jobs"] = jobs
    return json.dumps(base)


def test_daemon_reads_the_history_through_the_backend(release, tmp_path):
    """[predictor] history = "slurm": sacct through the Slurm backend (no file), the snapshot
    carries the history, the queue follows the predicted lengths, and each job's input says
    what was predicted and from where; a name never seen falls back to its time limit."""
    import subprocess
    from gimbalctl import daemon
    from gimbalctl.slurm.cli import CliBackend
    from tests.slurm_unit.replay import Replay
    doc = sacct_json(release)
    rep = Replay(release)

    def runner(argv, timeout):
        if argv[0] == "sacct":
            assert "--json" in argv and "--state=CD" in argv
            return subprocess.CompletedProcess(argv, 0, doc, "")
        return rep(argv, timeout)
    be = CliBackend(runner=runner, partition="gpu")
    daemon._SITE.clear()
    cfg = Config(policy="a-srpt", state_dir=str(tmp_path / "s"), predictor_history="slurm")
    res = cycle(tmp_path, be, cfg)
    assert len(res.snapshot.snapshot.history) == 15
    assert order_of(res, release) == ["p40", "p30", "p20", "p10"]
    ids = jobs_of(release)
    p10, p40 = ids["p"][1], ids["p"][0]
    assert res.snapshot.inputs[p10]["prediction_source"] == "rf"
    assert 2000 < res.snapshot.inputs[p10]["predicted"] < 3300  # ~50 min, seconds
    assert res.snapshot.inputs[p40]["predicted"] < 900
    p5 = ids["p5"]  # its name was never run: time limit, not 0 (a new name jumps nothing)
    assert res.snapshot.inputs[p5]["prediction_source"] == "unseen-group, time-limit"
    assert res.snapshot.inputs[p5]["predicted"] == res.snapshot.inputs[p5]["time_limit_s"]
    assert "(unseen-group, time-limit)" in res.plan.reasons[p5].text
    n = len([c for c in rep.calls if c[0] == "sacct"])
    assert n == 0  # the replay never saw sacct: the backend's runner answered it
    res2 = cycle(tmp_path, be, cfg)  # within the refit period: no second read
    assert order_of(res2, release) == order_of(res, release)


def test_daemon_without_accounting_warns_and_uses_time_limits(release, tmp_path):
    import subprocess
    from gimbalctl import daemon
    from gimbalctl.slurm.cli import CliBackend
    from tests.slurm_unit.replay import Replay
    rep = Replay(release)

    def runner(argv, timeout):
        if argv[0] == "sacct":
            return subprocess.CompletedProcess(argv, 1, "", "Slurm accounting storage is disabled")
        return rep(argv, timeout)
    daemon._SITE.clear()
    cfg = Config(policy="a-srpt", state_dir=str(tmp_path / "s"), predictor_history="slurm")
    res = cycle(tmp_path, CliBackend(runner=runner, partition="gpu"), cfg)
    assert any("sacct history not read" in w and "accounting storage is disabled" in w
               for w in res.warnings)
    assert order_of(res, release) == ["p10", "p20", "p30", "p40"]


def test_network_bandwidths_from_policy_options(tmp_path):
    """Eq. 5-6 bandwidths from gimbal.toml: ``[policy_options] intra_gbytes / inter_gbits``
    reach A-SRPT and its baselines (defaults NVLink 300 GB/s, 10 Gbps NICs, §V-B 1-a); a
    slower NIC raises a spread pipeline job's alpha_max, the bound Algorithm 1 line 8 uses."""
    from gimbalctl.cli_slurm import _policy
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from policies.model import ClusterSnapshot, Job
    from policies.pipeline import Network

    p = tmp_path / "g.toml"
    p.write_text('[daemon]\npolicy = "a-srpt"\n[policy_options]\nintra_gbytes = 100.0\n'
                 'inter_gbits = 1.0\n')
    cfg = load(str(p))
    assert cfg.policy_options == {"intra_gbytes": 100.0, "inter_gbits": 1.0}
    slow = _policy(cfg.policy, cfg.policy_options)
    assert slow.net == Network.from_units(100.0, 1.0) == Network(100e9, 1e9 / 8)
    assert _policy("wcs-duration", cfg.policy_options).net == slow.net
    default = get_policy("a-srpt")
    assert default.net == Network() == Network.from_units(300.0, 10.0)
    m = default_models()
    nodes = tuple(parse_cluster("2x8"))
    job = Job("h", 0.0, 4, "bert_large", 4, total_iters=10.0, stages=2)
    snap = ClusterSnapshot(0.0, nodes, {"h": job}, {}, tuple(g for n in nodes for g in n.gpus()),
                           m.profiles, m.memory, m.interference)
    (amin_s, amax_s, *_), (amin_d, amax_d, *_) = slow.virtual(snap)[0]["h"], default.virtual(snap)[0]["h"]
    assert amax_s > 5 * amax_d  # 10x less NIC bandwidth for the replicas spread one per server
    assert amin_s >= amin_d  # consolidated: only the (slower) intra-server links
