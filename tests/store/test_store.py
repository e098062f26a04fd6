"""State store on SQLite and on a real PostgreSQL server (tests/services/pg.py)."""
from __future__ import annotations

import json

import pytest

from gimbalctl.store import Store, StoreError, resolve_url
from gimbalctl.store.models import AuditRow, CycleRow, JobRow


def _cycle(st, jobs=(), decisions=()):
    return st.begin_cycle(policy="sjf", mode="ordering", knob="priority", backend="cli",
                          release="22.05", dry_run=False, jobs=list(jobs), plan={"order": ["1"]},
                          inputs={"1": {"app": "bert"}}, job_decisions=list(decisions))


def test_migrations_reach_head(store):
    assert store.revision() == store.head() == "0004"
    store.upgrade()  # idempotent
    assert store.revision() == "0004"


def test_cycle_decision_audit_roundtrip(store):
    cid = _cycle(store, [dict(job_id="1", name="a", state="PENDING", app="bert", batch=64)],
                 [dict(job_id="1", position=0, reason_code="wait_order", reason_text="x",
                       numbers={"length_s": 5.0}, action=None, target={"priority": 100})])
    aid = store.audit_intent(cid, "1", "priority", 100, 100010, ["scontrol", "update"])
    store.audit_result(aid, "applied", read_back=100010)
    store.finish_cycle(cid, "done", n_changes=1)
    cyc, jd, d = store.last_decision("1")
    assert cyc.status == "done" and jd.numbers == {"length_s": 5.0} and d["plan"] == {"order": ["1"]}
    row = store.audit_rows(job_id="1")[0]
    assert (json.loads(row.before), json.loads(row.after), row.status) == (100, 100010, "applied")
    assert store.job_rows()["1"].batch == 64


def test_failed_write_leaves_nothing(store):
    """begin_cycle is one transaction: a bad job decision rolls back the jobs and the cycle."""
    with pytest.raises(Exception):
        _cycle(store, [dict(job_id="9", state="PENDING")],
               [dict(job_id="9", position=0, reason_code=None, reason_text="", numbers={})])
    assert store.count(CycleRow) == 0 and store.count(JobRow) == 0


def test_audit_unique_per_cycle_job_field(store):
    cid = _cycle(store)
    store.audit_intent(cid, "1", "priority", 1, 2, [])
    with pytest.raises(Exception):
        store.audit_intent(cid, "1", "priority", 1, 2, [])
    assert store.count(AuditRow) == 1


def test_reports_ingested_once(store, tmp_path):
    d = tmp_path / "reports"
    d.mkdir()
    f = d / "7.jsonl"
    f.write_text('{"job_id": "7", "ts": 1.0, "step": 10, "samples_per_s": 5.5}\nnot json\n')
    assert store.ingest_reports(str(d)) == 1
    assert store.ingest_reports(str(d)) == 0  # offsets: nothing twice
    with open(f, "a") as fh:
        fh.write('{"job_id": "7", "ts": 2.0, "step": 20, "step_time_s": 0.5, "gpu_util": 90}\n')
    assert store.ingest_reports(str(d)) == 1
    assert store.latest_reports()["7"].step == 20


def test_profiles_override(store):
    from gimbalctl.profiles import default_models
    from gimbalctl.snapshot import merged_models
    p = dict(default_models().profiles["bert"].__dict__)
    p["alpha_comp"] = 9.0
    store.set_profile("bert", p, source="measured")
    profiles, _ = merged_models(default_models(), store.profiles())
    assert profiles["bert"].alpha_comp == 9.0


def test_bad_urls(tmp_path):
    assert resolve_url(str(tmp_path / "x.db")).startswith("sqlite:////")
    with pytest.raises(StoreError, match="nosuchdriver"):
        Store("nosuchdriver://x/y")
    with pytest.raises(StoreError, match="no/such/dir"):
        Store(str(tmp_path / "no/such/dir/g.db")).upgrade()


def test_overlong_job_strings_do_not_break_the_cycle(store):
    """Job names, users and apps come from users; a value longer than its column must not make
    PostgreSQL refuse the whole cycle (SQLite does not check lengths)."""
    job = dict(job_id="91", name="n" * 300, user="u" * 200, app="a" * 100, state="PENDING",
               num_gpus=1, gate=0)
    cid = store.begin_cycle(policy="sjf", mode="ordering", knob="priority", backend="cli",
                            release="22.05", dry_run=False, jobs=[job], plan={}, inputs={},
                            job_decisions=[])
    assert cid
    row = store.job_rows()["91"]
    assert row.name.startswith("nnn") and len(row.name) <= 256
    assert len(row.user) <= 128 and len(row.app) <= 64


def test_report_file_speaks_only_for_its_job(store, tmp_path):
    """A record naming another job than its file is dropped (the directory is writable by
    every user: docs/security.md)."""
    d = tmp_path / "reports"
    d.mkdir()
    (d / "7.jsonl").write_text('{"job_id": "7", "ts": 1.0, "step": 10, "samples_per_s": 5.0}\n'
                               '{"job_id": "8", "ts": 1.0, "step": 99, "samples_per_s": 1e9}\n')
    assert store.ingest_reports(str(d)) == 1
    assert set(store.latest_reports()) == {"7"}


def test_report_file_read_only_when_owned_by_the_jobs_user(store, tmp_path):
    """``owners``: job id -> uid.  A job not listed waits unread; a file owned by another uid
    than the job's user (or this process) is not read."""
    import os
    d = tmp_path / "reports"
    d.mkdir()
    f = d / "7.jsonl"
    f.write_text('{"job_id": "7", "ts": 1.0, "step": 10, "samples_per_s": 5.0}\n')
    assert store.ingest_reports(str(d), owners={}) == 0  # job 7 not listed: unread
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root (CI runs as root)")
    os.chown(f, 54321, -1)
    assert store.ingest_reports(str(d), owners={"7": 12345}) == 0  # someone else's file
    assert store.ingest_reports(str(d), owners={"7": 54321}) == 1  # the job's user's file


def test_the_launchers_own_report_file_counts_beside_a_foreign_one(store, tmp_path):
    """Someone else made ``7.jsonl`` first, so job 7's launcher wrote ``7.<16 hex>.jsonl``
    (launcher.report): only the file of the job's user counts, and it speaks only for job 7;
    names that are neither form are not read."""
    import os
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root (CI runs as root)")
    d = tmp_path / "reports"
    d.mkdir()
    forged, own = d / "7.jsonl", d / "7.0123456789abcdef.jsonl"
    forged.write_text('{"job_id": "7", "ts": 1.0, "step": 10, "samples_per_s": 1e9}\n')
    own.write_text('{"job_id": "7", "ts": 2.0, "step": 20, "samples_per_s": 5.0}\n'
                   '{"job_id": "8", "ts": 2.0, "step": 99, "samples_per_s": 1e9}\n')
    odd = d / "7.x.jsonl"  # not a name the launcher writes
    odd.write_text('{"job_id": "7", "ts": 3.0, "step": 30, "samples_per_s": 1e9}\n')
    os.chown(forged, 12345, -1)
    for f in (own, odd):
        os.chown(f, 54321, -1)
    assert store.ingest_reports(str(d), owners={"7": 54321, "8": 54321}) == 1
    rows = store.latest_reports()
    assert set(rows) == {"7"} and (rows["7"].step, rows["7"].samples_per_s) == (20, 5.0)
    own.write_text(own.read_text() + '{"job_id": "7", "ts": 4.0, "step": 40, "samples_per_s": 6.0}\n')
    assert store.ingest_reports(str(d), owners={"7": 54321}) == 1  # from the file's own offset
    assert store.latest_reports()["7"].step == 40
