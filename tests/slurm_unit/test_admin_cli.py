"""issue #14 items 8, 9, 11 (parts without a cluster: Slurm answers from the recorded 22.05
fixtures): the default config, read-only commands that never create a state store, audit and
cycles, warnings about the last cycle, config errors for non-UTF-8 files and priorities Slurm
refuses."""
from __future__ import annotations

import datetime as dt
import importlib
import json

import pytest
from click.testing import CliRunner

from gimbalctl import cli_slurm, config
from gimbalctl.cli import main
from gimbalctl.config import SLURM_PRIORITY_MAX, ConfigError, load
from gimbalctl.daemon import priority_ladder
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.store import Store
from tests.slurm_unit.replay import Replay


@pytest.fixture
def replay(monkeypatch):
    r = Replay("22.05")
    monkeypatch.setattr(cli_slurm, "_backend", lambda cfg: CliBackend(runner=r, partition="gpu"))
    return r


@pytest.fixture
def no_default_config(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "DEFAULT_CONFIG", str(tmp_path / "absent" / "gimbal.toml"))
    monkeypatch.delenv("GIMBAL_CONFIG", raising=False)
    monkeypatch.delenv("GIMBAL_DB", raising=False)


def invoke(args, env=None, **kw):
    return CliRunner().invoke(main, args, env=env or {}, **kw)


def write_conf(path, policy="sjf", db=None, extra=""):
    path.write_text(f'[daemon]\npolicy = "{policy}"\n' + (f'db = "{db}"\n' if db else "") + extra)
    return path


# ---------------------------------------------------------------- item 8
def test_gimbal_config_and_default_path_are_read_without_flag(monkeypatch, tmp_path,
                                                              no_default_config):
    conf = write_conf(tmp_path / "g.toml", "sjf")
    assert load().policy == "fifo" and load().source == ""
    monkeypatch.setenv("GIMBAL_CONFIG", str(conf))
    cfg = load()
    assert (cfg.policy, cfg.source) == ("sjf", str(conf))
    monkeypatch.delenv("GIMBAL_CONFIG")
    default = write_conf(tmp_path / "etc-gimbal.toml", "tiresias")
    monkeypatch.setattr(config, "DEFAULT_CONFIG", str(default))
    assert load().policy == "tiresias"
    assert load(str(conf)).policy == "sjf"  # --config wins
    monkeypatch.setenv("GIMBAL_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match=r"\$GIMBAL_CONFIG .*nope.toml: file not found"):
        load()


@pytest.mark.parametrize("cmd", [["queue"], ["explain", "{job}"]])
def test_read_only_commands_use_the_default_config_and_create_no_database(
        cmd, replay, tmp_path, no_default_config, monkeypatch):
    db = tmp_path / "var" / "gimbal.db"
    conf = write_conf(tmp_path / "g.toml", "sjf", db=str(db))
    monkeypatch.chdir(tmp_path)
    job = json.loads(invoke(["queue", "--live", "--json"]).stdout)["jobs"][0]["job_id"]
    args = [a.replace("{job}", job) for a in cmd]
    r = invoke([*args, "--json"], env={"GIMBAL_CONFIG": str(conf)})
    assert r.exit_code == 0, r.output + r.stderr
    out = json.loads(r.stdout)
    assert "policy sjf" in out["source"] or out.get("policy") == "sjf", out
    assert f"no state store at sqlite:///{db}" in r.stderr and str(conf) in r.stderr
    assert not db.exists() and not (tmp_path / "gimbal.db").exists()
    assert not db.parent.exists()
    assert replay.mutations() == []


@pytest.mark.parametrize("cmd", [["audit"], ["cycles"], ["audit", "--job", "5"]])
def test_audit_and_cycles_without_a_store_say_so_and_create_nothing(cmd, tmp_path,
                                                                    no_default_config):
    db = tmp_path / "g.db"
    r = invoke([*cmd, "--db", str(db)])
    assert r.exit_code == 4, r.output
    assert f"no state store at sqlite:///{db}" in r.stderr and "built-in defaults" in r.stderr
    assert not db.exists()


# ---------------------------------------------------------------- item 9
def _store_with_history(db, last_status="done", last_age_s=0.0, last_error=None):
    st = Store(str(db))
    st.upgrade()
    c1 = st.begin_cycle(policy="sjf", mode="ordering", knob="priority", backend="cli",
                        release="22.05", dry_run=False, jobs=[], plan={"order": ["7", "8"]},
                        inputs={"7": {"app": "bert"}, "8": {}},
                        job_decisions=[dict(job_id="7", position=0, reason_code="wait_order",
                                            reason_text="shortest", numbers={}, action=None,
                                            target={"priority": 100010}),
                                       dict(job_id="8", position=1, reason_code="wait_order",
                                            reason_text="longer", numbers={}, action=None,
                                            target={"priority": 100000})])
    a = st.audit_intent(c1, "7", "priority", 4000, 100010, ["scontrol", "update"],
                        reason="position 1 of 2")
    st.audit_result(a, "applied", 100010)
    b = st.audit_intent(c1, "8", "priority", 4000, 100000, ["scontrol", "update"],
                        reason="position 2 of 2")
    st.audit_result(b, "failed", 4000, "Invalid Priority value")
    st.finish_cycle(c1, "partial", n_changes=1)
    c2 = st.record_cycle(policy="sjf", mode="ordering", knob="priority", backend="cli",
                         release="22.05", status=last_status, error=last_error)
    if last_age_s:
        from gimbalctl.store.models import CycleRow, utcnow
        with st.tx() as s:
            for cid in (c1, c2):
                s.get(CycleRow, cid).started_at = utcnow() - dt.timedelta(seconds=last_age_s)
    return c1, c2


def test_audit_lists_every_change_with_filters(tmp_path, no_default_config):
    db = tmp_path / "g.db"
    c1, _ = _store_with_history(db)
    r = invoke(["audit", "--db", str(db), "--json"])
    assert r.exit_code == 0, r.stderr
    ch = json.loads(r.stdout)["changes"]
    assert [(c["job_id"], c["field"], c["before"], c["after"], c["status"], c["cycle"],
             c["policy"], c["reason"]) for c in ch] == [
        ("7", "priority", 4000, 100010, "applied", c1, "sjf", "position 1 of 2"),
        ("8", "priority", 4000, 100000, "failed", c1, "sjf", "position 2 of 2")]
    assert ch[1]["error"] == "Invalid Priority value"
    assert [c["job_id"] for c in json.loads(invoke(
        ["audit", "--db", str(db), "--job", "8", "--json"]).stdout)["changes"]] == ["8"]
    assert json.loads(invoke(["audit", "--db", str(db), "--cycle", "99", "--json"])
                      .stdout)["changes"] == []
    assert len(json.loads(invoke(["audit", "--db", str(db), "--since", "1h", "--json"])
                          .stdout)["changes"]) == 2
    future = (dt.datetime.now() + dt.timedelta(hours=2)).isoformat(timespec="minutes")
    assert json.loads(invoke(["audit", "--db", str(db), "--since", future, "--json"])
                      .stdout)["changes"] == []
    r = invoke(["audit", "--db", str(db), "--since", "yesterday"])
    assert r.exit_code == 2 and "--since" in r.stderr
    table = invoke(["audit", "--db", str(db)]).stdout
    assert "position 2 of 2; error: Invalid Priority value" in table and "100010" in table


def test_cycles_lists_failed_and_skipped(tmp_path, no_default_config):
    db = tmp_path / "g.db"
    c1, c2 = _store_with_history(db, "skipped", last_error="pid 9 on host h holds the lock")
    r = invoke(["cycles", "--db", str(db), "--json"])
    assert r.exit_code == 0, r.stderr
    cyc = json.loads(r.stdout)["cycles"]
    assert [(c["id"], c["status"]) for c in cyc] == [(c2, "skipped"), (c1, "partial")]
    assert cyc[0]["error"] == "pid 9 on host h holds the lock" and cyc[0]["pid"]
    assert [c["id"] for c in json.loads(invoke(
        ["cycles", "--db", str(db), "--status", "partial", "--json"]).stdout)["cycles"]] == [c1]
    assert "skipped" in invoke(["cycles", "--db", str(db)]).stdout


@pytest.mark.parametrize("status,age,needle", [
    ("failed", 0, "the last daemon cycle (cycle 2 at"),
    ("done", 3600, "started 1.0 h ago, more than stale_after = 300 s"),
    ("done", 0, None)])
def test_queue_and_explain_warn_about_a_failed_or_stale_last_cycle(
        replay, tmp_path, no_default_config, status, age, needle):
    db = tmp_path / "g.db"
    _store_with_history(db, status, last_age_s=age,
                        last_error="Slurm unavailable: Unable to contact slurm controller")
    for cmd in (["queue"], ["explain", "7"]):
        r = invoke([*cmd, "--db", str(db), "--json"])
        assert r.exit_code == 0, r.stderr
        warns = json.loads(r.stdout)["warnings"]
        if needle is None:
            assert warns == [] and "warning" not in r.stderr
        else:
            assert len(warns) == 1 and needle in warns[0], warns
            assert f"warning: {warns[0]}" in r.stderr
            if status == "failed":
                assert "failed: Slurm unavailable" in warns[0]


def test_read_only_command_on_an_old_schema_asks_for_db_upgrade(tmp_path, no_default_config):
    db = tmp_path / "g.db"
    Store(str(db)).upgrade("0002")
    r = invoke(["cycles", "--db", str(db)])
    assert r.exit_code == 4 and "db upgrade" in r.stderr
    assert Store(str(db)).revision() == "0002"


# ---------------------------------------------------------------- item 11
def test_non_utf8_config_is_a_clear_error(tmp_path, no_default_config, replay):
    conf = tmp_path / "g.toml"
    conf.write_bytes(b'[daemon]\npolicy = "sjf"\n# caf\xe9 latin-1\n')
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xe9 on line 3\)"):
        load(str(conf))
    r = invoke(["daemon", "--once", "--config", str(conf), "--db", str(tmp_path / "g.db")])
    assert r.exit_code == 2 and "not UTF-8" in r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit)


@pytest.mark.parametrize("base,ok", [(4294967295, False), (SLURM_PRIORITY_MAX, False),
                                     (SLURM_PRIORITY_MAX - 10, True), (100000, True)])
def test_priority_base_is_checked_against_slurms_range(tmp_path, base, ok):
    conf = tmp_path / "g.toml"
    conf.write_text(f"[ordering]\npriority_base = {base}\npriority_step = 10\n")
    if ok:
        assert load(str(conf)).priority_base == base
    else:
        with pytest.raises(ConfigError, match="Slurm's job priority range"):
            load(str(conf))


def test_a_long_queue_never_exceeds_slurms_maximum_priority():
    w: list = []
    assert priority_ladder(100000, 10, 50, w) == (100000, 10) and w == []
    base, step = priority_ladder(SLURM_PRIORITY_MAX - 100, 10, 50, w)
    assert base + 49 * step == SLURM_PRIORITY_MAX and step == 10 and len(w) == 1
    base, step = priority_ladder(1000, 10 ** 9, 50, w)
    assert base >= 1 and base + 49 * step <= SLURM_PRIORITY_MAX and step >= 1


def test_simulate_negative_seed_is_a_usage_error():
    r = invoke(["simulate", "--seed", "-1", "--limit", "2"])
    assert r.exit_code == 2 and "--seed" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_a_backend_that_cannot_be_used_is_a_recorded_failed_cycle(tmp_path, no_default_config):
    """``--backend pyslurm`` without a usable pyslurm (this host has none): exit 3, and the
    cycle is listed as failed with the reason (before: nothing was recorded)."""
    try:
        importlib.import_module("pyslurm")
        pytest.skip("pyslurm is importable here")  # only inside the 26.05 chroot
    except ImportError:
        pass
    db = tmp_path / "g.db"
    r = invoke(["daemon", "--once", "--policy", "sjf", "--backend", "pyslurm", "--db", str(db)],
               env={"GIMBAL_STATE_DIR": str(tmp_path / "state")})
    assert r.exit_code == 3, r.output + r.stderr
    r = invoke(["cycles", "--db", str(db), "--json"])
    (c,) = json.loads(r.stdout)["cycles"]
    assert c["status"] == "failed" and c["error"].startswith("Slurm unavailable: --backend pyslurm")


def test_revert_without_a_store_changes_nothing_and_creates_nothing(tmp_path, replay,
                                                                     no_default_config):
    db = tmp_path / "g.db"
    r = invoke(["revert", "--db", str(db)])
    assert r.exit_code == 0 and "revert: 0 change(s) (no state store at" in r.stdout
    assert not db.exists() and replay.mutations() == []
