"""Launcher reports -> state store: exactly-once ingestion (offsets + dedup keys, crash-safe)
and the per-application measured throughput in ``profiles.measured``; on SQLite and on a real
PostgreSQL server (tests/services/pg.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from gimbalctl.store import Store
from gimbalctl.store.models import ProfileRow, ReportOffsetRow, ReportRow

REPO = Path(__file__).resolve().parents[2]
BERT2 = {"7": {"app": "bert", "num_gpus": 2, "shared": False}}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path):
    """(Store at head, its URL usable from another process)."""
    if request.param == "sqlite":
        url = str(tmp_path / "g.db")
    else:
        from tests.services.pg import ensure_postgres
        base_url = ensure_postgres().replace("postgresql://", "postgresql+psycopg2://", 1)
        schema = f"t_{uuid.uuid4().hex[:10]}"  # a fresh schema per test
        base = Store(base_url)
        with base.engine.begin() as c:
            c.execute(text(f"create schema {schema}"))

        def drop():
            with base.engine.begin() as c:
                c.execute(text(f"drop schema {schema} cascade"))
            base.engine.dispose()
        request.addfinalizer(drop)
        url = f"{base_url}?options=-csearch_path%3D{schema}"
    st = Store(url)
    st.upgrade()
    yield st, url
    st.engine.dispose()


def line(job="7", ts=1.0, step=10, **kw) -> str:
    return json.dumps({"job_id": job, "ts": ts, "step": step, **kw}) + "\n"


def measured(st, app):
    row = st.profiles().get(app)
    return None if row is None else row.measured


def test_lines_ingested_once_and_folded_into_the_profile(db, tmp_path):
    st, _ = db
    d = tmp_path / "reports"
    d.mkdir()
    f = d / "7.jsonl"
    f.write_text(line(ts=1.0, step=10, samples_per_s=100.0, step_time_s=0.5)
                 + "not json\n"
                 + line(ts=2.0, step=20, samples_per_s=200.0)
                 + line(ts=3.0, step=30, samples_per_s=300.0, step_time_s=0.3)
                 + '{"job_id": "7", "ts": 4.0, "st')  # a line still being written
    assert st.ingest_reports(str(d), BERT2) == 3
    m = measured(st, "bert")["2"]
    assert (m["n"], m["samples_per_s"], m["n_step_time"]) == (3, 200.0, 2)
    assert m["step_time_s"] == pytest.approx(0.4) and m["jobs"] == ["7"]
    assert (m["last_ts"], m["last_samples_per_s"]) == (3.0, 300.0)
    # nothing new: nothing added, the profile is unchanged
    assert st.ingest_reports(str(d), BERT2) == 0
    assert measured(st, "bert")["2"] == m
    # the partial line is completed, one more line appended: exactly those two count
    with open(f, "a") as fh:
        fh.write('ep": 40, "samples_per_s": 400.0}\n' + line(ts=5.0, step=50, samples_per_s=500.0))
    assert st.ingest_reports(str(d), BERT2) == 2
    m = measured(st, "bert")["2"]
    assert (m["n"], m["samples_per_s"]) == (5, 300.0)
    assert st.count(ReportRow) == 5
    assert st.latest_reports()["7"].step == 50
    # a profile row with measurements only does not override the fitted model
    assert st.profiles()["bert"].params is None


def test_warmup_reports_are_stored_but_not_folded(db, tmp_path):
    """The first report of each launch (``warmup: true``, launcher.monitor) is kept in
    ``reports`` but the measured throughput averages only steady reports."""
    st, _ = db
    d = tmp_path / "reports"
    d.mkdir()
    (d / "7.jsonl").write_text(
        line(ts=1.0, step=10, samples_per_s=886.0, step_time_s=0.9, warmup=True)
        + line(ts=2.0, step=20, samples_per_s=4400.0, step_time_s=0.2)
        + line(ts=3.0, step=30, samples_per_s=4456.0, step_time_s=0.2, restart=0)
        # relaunch: its own warm-up report, then steady again
        + line(ts=4.0, step=35, samples_per_s=500.0, step_time_s=1.5, warmup=True, restart=1)
        + line(ts=5.0, step=45, samples_per_s=4428.0, step_time_s=0.2, restart=1))
    assert st.ingest_reports(str(d), BERT2) == 5
    m = measured(st, "bert")["2"]
    assert m["n"] == 3 and m["samples_per_s"] == pytest.approx(4428.0)
    assert m["step_time_s"] == pytest.approx(0.2)
    assert st.count(ReportRow) == 5 and st.latest_reports()["7"].step == 45


def test_crash_before_commit_keeps_nothing_then_ingests_once(db, tmp_path):
    """A daemon killed inside the ingest transaction leaves no row, offset or profile change;
    the next run ingests every line exactly once."""
    st, url = db
    d = tmp_path / "reports"
    d.mkdir()
    (d / "7.jsonl").write_text("".join(line(ts=float(i), step=i, samples_per_s=10.0 * i)
                                       for i in range(1, 5)))
    code = ("import sys; from gimbalctl.store import Store; "
            "Store(sys.argv[1]).ingest_reports(sys.argv[2], "
            "{'7': {'app': 'bert', 'num_gpus': 2}}); print('no crash')")
    env = dict(os.environ, GIMBAL_TEST_CRASH="ingest_before_commit", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", code, url, str(d)], env=env, capture_output=True,
                       text=True, timeout=60, cwd=str(REPO))
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert st.count(ReportRow) == 0 and st.count(ReportOffsetRow) == 0
    assert st.count(ProfileRow) == 0
    assert st.ingest_reports(str(d), BERT2) == 4
    assert st.ingest_reports(str(d), BERT2) == 0
    m = measured(st, "bert")["2"]
    assert (m["n"], m["samples_per_s"]) == (4, 25.0)


def test_replaced_file_is_read_again_without_duplicates(db, tmp_path):
    st, _ = db
    d = tmp_path / "reports"
    d.mkdir()
    f = d / "7.jsonl"
    f.write_text(line(ts=1.0, step=1, samples_per_s=10.0) + line(ts=2.0, step=2, samples_per_s=20.0)
                 + line(ts=2.5, step=3, samples_per_s=30.0))
    assert st.ingest_reports(str(d), BERT2) == 3
    # the file is replaced by a shorter one: one record seen before, one new
    f.write_text(line(ts=2.0, step=2, samples_per_s=20.0) + line(ts=3.0, step=4, samples_per_s=100.0))
    with st.tx() as s:
        assert os.path.getsize(f) < s.get(ReportOffsetRow, "7").offset
    assert st.ingest_reports(str(d), BERT2) == 1
    m = measured(st, "bert")["2"]
    assert (m["n"], m["samples_per_s"]) == (4, 40.0)
    assert sorted(r.step for r in _reports(st)) == [1, 2, 3, 4]


def _reports(st):
    from sqlalchemy import select
    with st.tx() as s:
        return list(s.scalars(select(ReportRow)))


def test_attribution_sources_and_bad_values(db, tmp_path):
    """App / GPU count come from the current Slurm job (job_info), else the jobs table; a
    record's own app/num_gpus win; shared-GPU jobs are kept apart; unknown jobs and
    non-finite numbers are stored without touching a profile (and never break PostgreSQL)."""
    st, _ = db
    st.begin_cycle(policy="sjf", mode="ordering", knob="priority", backend="cli", release="22.05",
                   dry_run=False, jobs=[dict(job_id="8", state="RUNNING", app="ncf", num_gpus=4)],
                   plan={}, inputs={}, job_decisions=[])
    d = tmp_path / "reports"
    d.mkdir()
    (d / "7.jsonl").write_text(line("7", 1.0, 1, samples_per_s=50.0))
    (d / "8.jsonl").write_text(line("8", 1.0, 1, samples_per_s=80.0)
                               + line("8", 2.0, 2, samples_per_s=90.0, app="imagenet", num_gpus=8))
    (d / "9.jsonl").write_text(line("9", 1.0, 1, samples_per_s=70.0))
    (d / "10.jsonl").write_text('{"job_id": "10", "ts": 1.0, "step": 1, "samples_per_s": NaN, '
                                '"gpu_util": Infinity, "x": [1, -Infinity]}\n'
                                + line("10", 2.0, 2, samples_per_s=-5.0))
    (d / "ignored.txt").write_text(line("11", 1.0, 1, samples_per_s=1.0))
    info = {"7": {"app": "cifar10", "num_gpus": 1, "shared": True},
            "10": {"app": "bert", "num_gpus": 1}}
    assert st.ingest_reports(str(d), info) == 6  # not the .txt file
    assert measured(st, "cifar10") == {"1:shared": measured(st, "cifar10")["1:shared"]}
    assert measured(st, "cifar10")["1:shared"]["samples_per_s"] == 50.0
    assert measured(st, "ncf")["4"]["samples_per_s"] == 80.0       # from the jobs table
    assert measured(st, "imagenet")["8"]["samples_per_s"] == 90.0  # the record's own fields
    assert "bert" not in st.profiles()  # job 10: no usable throughput; job 9: unknown job
    rows = {(r.job_id, r.step): r for r in _reports(st)}
    assert ("9", 1) in rows and rows[("10", 1)].samples_per_s is None
    assert rows[("10", 1)].gpu_util is None and rows[("10", 1)].extra == {"x": [1, None]}


def test_set_profile_keeps_measured_and_merged_models_skip_measured_only(db, tmp_path):
    from gimbalctl.profiles import default_models
    from gimbalctl.snapshot import merged_models
    st, _ = db
    d = tmp_path / "reports"
    d.mkdir()
    (d / "7.jsonl").write_text(line(samples_per_s=100.0))
    st.ingest_reports(str(d), BERT2)
    profiles, _ = merged_models(default_models(), st.profiles())
    assert profiles["bert"] == default_models().profiles["bert"]
    p = dict(default_models().profiles["bert"].__dict__)
    p["alpha_comp"] = 9.0
    st.set_profile("bert", p, source="operator")
    assert measured(st, "bert")["2"]["n"] == 1
    profiles, _ = merged_models(default_models(), st.profiles())
    assert profiles["bert"].alpha_comp == 9.0


def test_migration_0002_keeps_existing_profiles(tmp_path):
    st = Store(str(tmp_path / "old.db"))
    st.upgrade("0001")
    with st.engine.begin() as c:
        c.execute(text("insert into profiles (app, params, source, updated_at) values "
                       "('bert', '{\"alpha_comp\": 1}', 'old', '2026-01-01 00:00:00')"))
    assert st.upgrade("0002") == "0002"
    row = st.profiles()["bert"]
    assert (row.params, row.source, row.measured) == ({"alpha_comp": 1}, "old", None)
