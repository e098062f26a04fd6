import logging
import os
import signal

import pytest

from launcher import checkpoint, config
from launcher.envvars import ConfigError
from launcher.mps import (MEM_VAR, THREAD_VAR, MPSConfigError, mps_env, parse_mem_limit, squeeze,
                          swell)
from launcher.report import ReportWriter, read_reports, read_reports_from, report_job_of


# ---------------------------------------------------------------- reports
def test_report_roundtrip(tmp_path):
    p = str(tmp_path / "reports" / "9.jsonl")
    with ReportWriter(p, "9") as w:
        for s in range(1, 4):
            assert w.write(s, samples_per_s=100.0 * s, step_time_s=0.1, gpu_util=None)
    recs = read_reports(p)
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert all(r["job_id"] == "9" and isinstance(r["ts"], float) for r in recs)
    assert recs[2]["samples_per_s"] == 300.0 and "gpu_util" not in recs[0]


def test_read_skips_malformed_and_partial(tmp_path):
    p = tmp_path / "1.jsonl"
    p.write_text('{"job_id": "1", "ts": 1.0, "step": 1}\nnot json\n{"ts": 2}\n'
                 '{"job_id": 1, "ts": 3.0, "step": 3}\n{"job_id": "1", "ts": 4')
    recs, off = read_reports_from(str(p), 0)
    assert [r["step"] for r in recs] == [1, 3] and recs[1]["job_id"] == "1"
    with open(p, "a") as fh:
        fh.write(', "step": 4}\n')
    more, off2 = read_reports_from(str(p), off)
    assert [r["step"] for r in more] == [4] and off2 == os.path.getsize(p)
    assert read_reports(str(tmp_path / "missing.jsonl")) == []


def test_report_io_error_never_raises(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    w = ReportWriter(str(blocker / "sub" / "1.jsonl"), "1")  # parent is a file
    with caplog.at_level(logging.WARNING, logger="gimbal.report"):
        for s in range(5):
            w.write(s)
            w.close() if s == 4 else None
    assert w.written == 0 and w.dropped == 5
    assert len([r for r in caplog.records if "cannot write" in r.message]) == 1


def _own_files(d, job):
    return sorted(f for f in os.listdir(d) if f != f"{job}.jsonl" and report_job_of(f) == job)


def test_report_file_that_is_a_link_is_left_for_an_own_one(tmp_path):
    """``<job>.jsonl`` made a link by someone else (the directory is writable by all): the
    writer does not follow it; its records go to a new ``<job>.<16 hex>.jsonl``."""
    d = tmp_path / "reports"
    d.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    (d / "9.jsonl").symlink_to(target)
    with ReportWriter(str(d / "9.jsonl"), "9") as w:
        w.write(1, samples_per_s=10.0)
    assert target.read_text() == "keep\n"
    (own,) = _own_files(d, "9")
    assert w.path == str(d / own) and [r["step"] for r in read_reports(w.path)] == [1]
    assert w.written == 1 and w.dropped == 0


def test_report_names():
    assert [report_job_of(n) for n in ("7.jsonl", "7_3.0123456789abcdef.jsonl", "7.x.jsonl",
                                       "7.0123456789ABCDEF.jsonl", "7.jsonl.tmp", ".jsonl",
                                       "7.0123456789abcdef0.jsonl")] == \
        ["7", "7_3", None, None, None, None, None]


@pytest.mark.parametrize("mode", [0o644, 0o666])
def test_report_file_of_another_user_is_left_for_an_own_one(mode):
    """As an unprivileged uid in a 1733 directory (as ``state_dir/reports``): another
    user's ``<job>.jsonl``, writable by the job's user or not, is left as it is; the records
    go to a file of the job's user that the daemon reads (gimbalctl.store ``owners``)."""
    import shutil
    import tempfile
    if os.geteuid() != 0:
        pytest.skip("switching to other uids needs root (CI runs as root)")
    top = tempfile.mkdtemp(prefix="gimbal-reports-")
    try:
        os.chmod(top, 0o755)
        d = os.path.join(top, "reports")
        os.mkdir(d)
        os.chmod(d, 0o1733)
        forged = os.path.join(d, "9.jsonl")
        with open(forged, "w") as fh:
            fh.write('{"job_id": "9", "ts": 1.0, "step": 1, "samples_per_s": 1e9}\n')
        os.chown(forged, 54321, 54321)
        os.chmod(forged, mode)
        pid = os.fork()
        if pid == 0:  # the job's user
            code = 1
            try:
                os.setgid(54322)
                os.setuid(54322)
                with ReportWriter(forged, "9") as w:
                    w.write(5, samples_per_s=5.0)
                code = 0 if (w.written, w.dropped) == (1, 0) else 2
            finally:
                os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0
        assert read_reports(forged) == [{"job_id": "9", "ts": 1.0, "step": 1, "samples_per_s": 1e9}]
        (own,) = _own_files(d, "9")
        st = os.stat(os.path.join(d, own))
        assert st.st_uid == 54322
        assert [r["samples_per_s"] for r in read_reports(os.path.join(d, own))] == [5.0]
    finally:
        shutil.rmtree(top)


# ---------------------------------------------------------------- MPS
def test_lgrr_steps():
    assert [squeeze(p) for p in (100, 55, 10)] == [90, 50, 10]
    assert [swell(p) for p in (90, 55, 100)] == [100, 60, 100]


def test_mps_env_never_loosens():
    env = mps_env(50, 8000, 2, {THREAD_VAR: "30", MEM_VAR: "0=4G"})
    assert env[THREAD_VAR] == "30"
    assert parse_mem_limit(env[MEM_VAR]) == {"0": 4096.0, "1": 8000.0}
    env = mps_env(20, 2000, 1, {THREAD_VAR: "30", MEM_VAR: "0=4G"})
    assert env == {THREAD_VAR: "20", MEM_VAR: "0=2000M"}
    assert mps_env(None, None, 4, {}) == {}
    assert mps_env(60, 1000, 3, {MEM_VAR: "512M"})[MEM_VAR] == "0=512M,1=512M,2=512M"
    with pytest.raises(MPSConfigError, match=THREAD_VAR):
        mps_env(50, None, 1, {THREAD_VAR: "lots"})
    with pytest.raises(MPSConfigError, match=MEM_VAR):
        mps_env(None, 100, 1, {MEM_VAR: "0=8XB"})


# ---------------------------------------------------------------- config()
def test_config_from_env():
    c = config({"GIMBAL_SUB_BATCH": "8", "GIMBAL_GLOBAL_BATCH": "64", "GIMBAL_STEALING": "1",
                "GIMBAL_RESTART_COUNT": "2", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"})
    assert (c.sub_batch, c.global_batch, c.stealing, c.resumed, c.mps_thread_pct) == (8, 64, True, True, "40")
    assert c.resolve_batch(32) == (64, 8)
    assert config({"GIMBAL_ACCUM_STEPS": "3"}).resolve_batch(10) == (10, 4)
    # accum_steps is per rank: 64 samples over 4 ranks = 16 each, 4 steps -> micro-batch 4
    assert config({"GIMBAL_ACCUM_STEPS": "4"}).resolve_batch(64, world_size=4) == (64, 4)
    assert config({}).resolve_batch(10) == (10, 10)
    with pytest.raises(ConfigError, match="GIMBAL_SUB_BATCH"):
        config({"GIMBAL_SUB_BATCH": "x"})


# ---------------------------------------------------------------- checkpoint hook
def test_sigusr2_sets_flag():
    old = signal.getsignal(signal.SIGUSR2)
    try:
        checkpoint.clear()
        checkpoint.install_handler()
        assert not checkpoint.should_checkpoint()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert checkpoint.should_checkpoint(sync=False)
    finally:
        checkpoint.clear()
        signal.signal(signal.SIGUSR2, old)


def test_save_load_and_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("GIMBAL_CHECKPOINT_DIR", str(tmp_path / "ck"))
    assert checkpoint.load_checkpoint() is None
    with pytest.raises(SystemExit) as ei:
        checkpoint.checkpoint_and_exit({"step": 7})
    assert ei.value.code == checkpoint.EXIT_CHECKPOINT == 75
    assert checkpoint.load_checkpoint()["step"] == 7
    assert os.listdir(tmp_path / "ck") == ["checkpoint.pt"]
