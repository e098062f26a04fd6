"""The finished-job history from sacct (seed 003 A-SRPT on a site): the Slurm backend's read
(``sacct --json`` 22.05 recorded / 26.05 shape, the two-read ``sacct -P`` fallback), every
field untrusted, the history the daemon builds from it with gimbal's own records, and the
cache that keeps a cycle from waiting on sacct or the fit."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gimbalctl.config import ConfigError, load
from gimbalctl.predictor import group_key
from gimbalctl.site_history import SiteHistory, history_from_slurm
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.slurm.errors import SlurmParseError, SlurmUnavailable
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.slurm.sacct import (finished_from_sacct_json, finished_from_sacct_parsable,
                                   gpus_from_tres)
from gimbalctl.slurm.sanitize import _bad
from gimbalctl.slurm.types import SlurmFinishedJob

from tests.slurm_unit.replay import FIX

FUZZ = settings(max_examples=int(os.environ.get("GIMBAL_FUZZ_EXAMPLES", 1_000)), deadline=None,
                database=None, suppress_health_check=list(HealthCheck))
D22 = FIX / "22.05"
DOC = {r: json.loads((FIX / r / "sacct.json").read_text(), strict=False)
       for r in ("22.05", "26.05")}


def key(j: SlurmFinishedJob):
    return (j.job_id, j.user, j.state, j.submit_time, j.start_time, j.end_time, j.num_gpus,
            j.meta.app, j.meta.batch)


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_sacct_json_recorded(release):
    warnings: list[str] = []
    jobs = {j.job_id: j for j in finished_from_sacct_json(DOC[release], warnings)}
    assert warnings == []
    assert sorted(jobs, key=int) == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "12",
                                     "13", "14"]
    a = jobs["6"]
    assert (a.name, a.user, a.state, a.num_gpus, a.duration) == ("resnet", "alice", "COMPLETED", 2, 2.0)
    assert (a.meta.app, a.meta.batch, a.meta.source) == ("resnet50", 128, "admin_comment")
    assert a.comment == "gimbal:app=resnet50,batch=128"  # kept as the user wrote it
    assert jobs["9"].state == "FAILED" and jobs["10"].num_gpus == 0
    assert jobs["13"].state == "CANCELLED"
    # the user's Comment with a newline and a gimbal: tag: cleaned, and not metadata
    assert "\n" not in jobs["12"].comment and not jobs["12"].meta.tagged
    assert jobs["12"].warnings
    # JSON escapes the name that forges a line in sacct -P: one job, its name cleaned
    assert jobs["14"].name == "evil?77|resnet|bob" and "77" not in jobs


def test_sacct_json_22_and_26_shapes_read_alike():
    a = [key(j) for j in finished_from_sacct_json(DOC["22.05"])]
    b = [key(j) for j in finished_from_sacct_json(DOC["26.05"])]
    assert a == b


def test_sacct_parsable_fallback_is_not_forged_by_a_job_name():
    safe, names = (D22 / "sacct-P-safe.txt").read_text(), (D22 / "sacct-P-names.txt").read_text()
    warnings: list[str] = []
    jobs = {j.job_id: j for j in finished_from_sacct_parsable(safe, names, warnings)}
    assert warnings == []
    by_json = {j.job_id: j for j in finished_from_sacct_json(DOC["22.05"])}
    assert {k: key(v) for k, v in jobs.items()} == {k: key(v) for k, v in by_json.items()}
    assert "77" not in jobs  # "evil\n77|resnet|bob": the line it forged names no real job
    assert jobs["14"].name == "evil" and jobs["6"].name == "resnet"
    assert all(j.comment == "" for j in jobs.values())  # the user's Comment is not read here
    # the one-read form with Comment/JobName really is forged (why the fallback reads twice)
    assert "\n77|resnet|bob|alice|2026-" in (D22 / "sacct-P.txt").read_text()


def test_sacct_parsable_drops_a_job_whose_name_line_was_forged():
    safe = ("5|alice|2026-11-23T00:51:26|2026-11-23T00:51:26|2026-11-23T00:51:27|COMPLETED|"
            "gres/gpu=2|\n7|bob|2026-11-23T00:51:26|2026-11-23T00:51:26|2026-11-23T00:51:57|"
            "COMPLETED|gres/gpu=1|\n")
    # alice's job 5 is named "x\n7|short": a second name line for bob's job 7
    names = "5|x\n7|short\n7|bob-long\n"
    warnings: list[str] = []
    jobs = {j.job_id: j for j in finished_from_sacct_parsable(safe, names, warnings)}
    assert set(jobs) == {"5"} and jobs["5"].name == "x"
    assert len(warnings) == 1 and "sacct job 7 skipped" in warnings[0] and "ambiguous" in warnings[0]
    # a name that continues over lines without a job id stays with its job
    jobs = finished_from_sacct_parsable(safe, "5|a\nb|c\n7|n\n")
    assert [j.name for j in jobs] == ["a?b|c", "n"]


def test_bad_records_are_skipped_one_warning_each():
    good = DOC["22.05"]["jobs"][4]
    bad_time = json.loads(json.dumps(good))
    bad_time["time"]["start"] = "yesterday"
    backwards = json.loads(json.dumps(good))
    backwards["time"]["end"] = backwards["time"]["start"] - 5
    huge = json.loads(json.dumps(good))
    huge["tres"]["allocated"] = [{"type": "gres", "name": "gpu", "count": 2 ** 25}]
    warnings: list[str] = []
    out = finished_from_sacct_json({"jobs": [good, bad_time, backwards, huge, 7, {"job_id": -1}]},
                                   warnings)
    assert [j.job_id for j in out] == ["5"]
    assert len(warnings) == 5 and all("skipped" in w or "not" in w for w in warnings)
    with pytest.raises(SlurmParseError):
        finished_from_sacct_json({"no": "jobs"})
    noval = json.loads(json.dumps(good))  # Slurm's NO_VAL count: no GPUs, not an error
    noval["tres"]["allocated"] = [{"type": "gres", "name": "gpu", "count": 2 ** 60}]
    assert finished_from_sacct_json({"jobs": [noval]})[0].num_gpus == 0
    assert gpus_from_tres("billing=1,cpu=1,gres/gpu=4,mem=1G") == 4
    assert gpus_from_tres("cpu=1,gres/gpu:a100=4") == 0
    with pytest.raises(SlurmParseError):
        gpus_from_tres("gres/gpu=99999999999999999999")


# ------------------------------------------------------------------ backend
class Runner:
    """sacct answers: ``json`` (the recorded document), ``nojson`` (sacct without --json), or
    ``down`` (slurmdbd unreachable)."""

    def __init__(self, mode="json"):
        self.mode, self.calls = mode, []

    def __call__(self, argv, timeout):
        argv = tuple(argv)
        self.calls.append((argv, timeout))
        if self.mode == "down":
            return subprocess.CompletedProcess(argv, 1, "", "sacct: error: Problem talking to "
                                               "the database: Connection refused")
        if "--json" in argv:
            if self.mode == "nojson":
                return subprocess.CompletedProcess(argv, 1, "", "sacct: unrecognized option '--json'")
            return subprocess.CompletedProcess(argv, 0, (D22 / "sacct.json").read_text(), "")
        fmt = [a for a in argv if a.startswith("--format=")][0]
        f = D22 / ("sacct-P-names.txt" if fmt == "--format=JobID,JobName" else "sacct-P-safe.txt")
        return subprocess.CompletedProcess(argv, 0, f.read_text(), "")


def test_backend_reads_sacct_json_with_a_bounded_window():
    r = Runner()
    be = CliBackend(runner=r)
    jobs = be.finished_jobs(1_795_000_000.0, None, max_rows=100, timeout=7)
    assert be.history_format == "json" and be.history_warnings == []
    argv, timeout = r.calls[0]
    assert argv[:4] == ("sacct", "-a", "-X", "--state=CD") and "--json" in argv and timeout == 7
    assert argv[argv.index("-S") + 1] == time.strftime("%Y-%m-%dT%H:%M:%S",
                                                       time.localtime(1_795_000_000.0))
    assert argv[argv.index("-E") + 1] == "now"
    assert {j.state for j in jobs} == {"COMPLETED"} and len(jobs) == 11
    cut = be.finished_jobs(0.0, None, max_rows=3)
    assert [j.job_id for j in cut] == ["12", "10", "14"] or len(cut) == 3
    assert max(j.end_time for j in cut) == max(j.end_time for j in jobs)
    assert "kept the newest 3" in be.history_warnings[0]


def test_backend_falls_back_to_sacct_parsable():
    r = Runner("nojson")
    be = CliBackend(runner=r)
    jobs = be.finished_jobs(0.0)
    assert be.history_format == "parsable"
    assert [a for a, _ in r.calls][1][-1] == "--format=JobID,User,Submit,Start,End,State,AllocTRES,AdminComment"
    assert [a for a, _ in r.calls][2][-1] == "--format=JobID,JobName"
    assert len(jobs) == 11 and "77" not in {j.job_id for j in jobs}


def test_backend_without_slurmdbd_raises_unavailable():
    with pytest.raises(SlurmUnavailable, match="database"):
        CliBackend(runner=Runner("down")).finished_jobs(0.0)


# ------------------------------------------------------------------ history
def test_history_groups_like_the_live_job_and_takes_gimbal_records():
    recs = finished_from_sacct_json(DOC["22.05"])
    rows = {"7": SimpleNamespace(meta={"app": "bert", "batch": 64, "source": "admin_comment"})}
    reports = {"5": SimpleNamespace(step=1200, extra={"global_batch": 256}),
               "6": SimpleNamespace(step="junk", extra="junk")}
    hist = {f.id: f for f in history_from_slurm(recs, rows, reports)}
    assert set(hist) == {"1", "2", "3", "4", "5", "6", "7", "8", "12", "14"}  # completed GPU jobs
    assert hist["5"].group_id == group_key("alice", "resnet", 2, 128)  # snapshot's key for a live job
    assert hist["5"].group_id == hist["6"].group_id != group_key("bob", "resnet", 2, 128)
    assert (hist["5"].iterations, hist["5"].global_batch) == (1200.0, 256)
    assert (hist["6"].iterations, hist["6"].global_batch) == (None, 128)
    assert hist["7"].app == "bert" and hist["7"].group_id == group_key("bob", "resnet", 1, 64)
    # a Comment that does not start with the tag is no grouping hint (job_submit.lua would
    # not have copied it either)
    assert hist["12"].group_id == group_key("alice", "multi", 1, None)
    ends = [f.end_time for f in history_from_slurm(recs)]
    assert ends == sorted(ends)


class SlowBackend:
    name, prefix = "cli", ()

    def __init__(self):
        self.gate = threading.Event()
        self.calls = 0
        self.fail = False
        self.history_warnings: list[str] = []
        self.history_format = "json"

    def cluster_name(self):
        return "c"

    def finished_jobs(self, since, until=None, max_rows=100_000, timeout=None):
        self.calls += 1
        if self.calls > 1:
            assert self.gate.wait(10)
        if self.fail:
            raise SlurmUnavailable("slurmdbd down")
        n = 3 if self.calls == 1 else 6
        return [SlurmFinishedJob(str(i), "", "u", "COMPLETED", 0.0, 10.0 * i, 10.0 * i + 60 * (i % 2 + 1),
                                 1, meta=parse_meta("")) for i in range(1, n + 1)]


def test_site_history_refreshes_in_the_background():
    be = SlowBackend()
    sh = SiteHistory("mean", refit=100.0)
    w: list[str] = []
    f1 = sh.get(be, {}, {}, 1000.0, w)  # first call: read and fit at once
    assert f1 is not None and len(f1.history) == 3 and be.calls == 1 and w == []
    assert sh.get(be, {}, {}, 1050.0, w) is f1 and be.calls == 1  # within the refit period
    t0 = time.monotonic()
    assert sh.get(be, {}, {}, 1101.0, w) is f1  # due: refresh starts, the cycle does not wait
    assert time.monotonic() - t0 < 1.0 and be.calls == 2
    assert sh.get(be, {}, {}, 1102.0, w) is f1  # still running: no second read
    be.gate.set()
    sh.wait(10)
    f2 = sh.get(be, {}, {}, 1103.0, w)
    assert len(f2.history) == 6 and f2 is not f1 and be.calls == 2
    be.fail = True
    assert sh.get(be, {}, {}, 1300.0, w) is f2
    sh.wait(10)
    assert sh.get(be, {}, {}, 1301.0, w) is f2 and any("slurmdbd down" in x and "using the history"
                                                       in x for x in w)


def test_site_history_failure_is_a_warning_and_retried_sooner():
    be = SlowBackend()
    be.fail, be.calls = True, 1
    be.gate.set()
    sh = SiteHistory("rf", refit=3600.0)
    w: list[str] = []
    assert sh.get(be, {}, {}, 0.0, w) is None
    assert w and "predicting from time limits" in w[0]
    sh.get(be, {}, {}, 100.0, w)
    assert be.calls == 2  # not yet: a failed read is tried again after min(refit, 300) s
    sh.get(be, {}, {}, 301.0, w)
    assert be.calls == 3


def test_predictor_history_config(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('[predictor]\nhistory = "slurm"\nhistory_days = 7\nhistory_max_rows = 500\n'
                 'history_timeout = 30\nunseen = "zero"\n')
    cfg = load(str(p))
    assert (cfg.predictor_history, cfg.predictor_days, cfg.predictor_max_rows,
            cfg.predictor_timeout, cfg.predictor_unseen) == ("slurm", 7.0, 500, 30.0, "zero")
    for bad in ('history = "sacct"', 'history = "slurm"\nsacct = "/x"', 'history_days = 0',
                'history_max_rows = 0', 'unseen = "mean"'):
        p.write_text("[predictor]\n" + bad + "\n")
        with pytest.raises(ConfigError, match="predictor"):
            load(str(p))


# ------------------------------------------------------------------ hostile input
def _clean(v) -> bool:
    v.encode("utf-8")
    return len(v) <= 4096 and not any(_bad(c) for c in v)


nasty = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                  st.binary(max_size=30).map(lambda b: b.decode("utf-8", errors="replace")),
                  st.sampled_from(["\n" * 3000, "x" * 100_000, "\ud800", "gimbal:v1;app=a;batch=9"]),
                  st.dictionaries(st.sampled_from(["set", "infinite", "number", "current"]),
                                  st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                                  max_size=3),
                  st.lists(st.one_of(st.none(), st.text(max_size=5),
                                     st.fixed_dictionaries({"type": st.just("gres"),
                                                            "name": st.just("gpu"),
                                                            "count": st.integers(-5, 2 ** 40)})),
                           max_size=2))
BASE = DOC["22.05"]["jobs"] + DOC["26.05"]["jobs"]


@st.composite
def mutated(draw):
    rec = json.loads(json.dumps(draw(st.sampled_from(BASE))))
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from([("job_id",), ("name",), ("user",), ("state",),
                                     ("state", "current"), ("time",), ("time", "start"),
                                     ("time", "end"), ("time", "submission"), ("tres",),
                                     ("tres", "allocated"), ("comment",),
                                     ("comment", "administrator"), ("comment", "job")]))
        tgt = rec
        for k in path[:-1]:
            tgt = tgt.get(k) if isinstance(tgt, dict) else None
        if isinstance(tgt, dict):
            if draw(st.booleans()):
                tgt.pop(path[-1], None)
            else:
                tgt[path[-1]] = draw(nasty)
    return rec


def test_fuzz_sacct_json():
    @FUZZ
    @given(st.lists(mutated(), min_size=1, max_size=3))
    def run(records):
        warnings: list[str] = []
        out = finished_from_sacct_json({"jobs": records}, warnings)
        assert len(out) + len(warnings) <= len(records)
        for j in out:
            assert j.job_id.isdigit() and j.end_time >= j.start_time >= j.submit_time
            assert 0 <= j.num_gpus <= 1 << 20
            for f in (j.name, j.user, j.state, j.comment, j.admin_comment):
                assert _clean(f)
        for w in warnings:
            assert _clean(w[:10_000]) and "sacct" in w
        history_from_slurm(out)
    run()


def test_fuzz_sacct_parsable():
    safe = (D22 / "sacct-P-safe.txt").read_text().splitlines()
    names = (D22 / "sacct-P-names.txt").read_text().splitlines()
    line = st.one_of(st.sampled_from(safe), st.text(max_size=80),
                     st.binary(max_size=80).map(lambda b: b.decode("utf-8", errors="replace")),
                     st.lists(st.sampled_from(["5", "x", "2026-11-23T00:51:26", "Unknown",
                                               "COMPLETED", "gres/gpu=99999999", "", "\ud800"]),
                              min_size=8, max_size=8).map("|".join))
    nline = st.one_of(st.sampled_from(names), st.text(max_size=40),
                      st.tuples(st.sampled_from(["5", "6", "7", "x"]), st.text(max_size=20))
                      .map("|".join))

    @FUZZ
    @given(st.lists(line, max_size=6), st.lists(nline, max_size=6))
    def run(s_lines, n_lines):
        warnings: list[str] = []
        out = finished_from_sacct_parsable("\n".join(s_lines), "\n".join(n_lines), warnings)
        ids = [j.job_id for j in out]
        assert len(ids) == len(set(ids))
        for j in out:
            assert j.end_time >= j.start_time and _clean(j.name) and _clean(j.user)
    run()


def test_loop_daemon_does_not_wait_even_for_the_first_read():
    be = SlowBackend()
    be.calls = 1  # every read waits for the gate
    sh = SiteHistory("mean", refit=100.0)
    w: list[str] = []
    t0 = time.monotonic()
    assert sh.get(be, {}, {}, 0.0, w, first_wait=False) is None
    assert time.monotonic() - t0 < 1.0 and any("in the background" in x for x in w)
    assert sh.get(be, {}, {}, 1.0, w, first_wait=False) is None and be.calls == 2
    be.gate.set()
    sh.wait(10)
    assert len(sh.get(be, {}, {}, 2.0, w, first_wait=False).history) == 6
