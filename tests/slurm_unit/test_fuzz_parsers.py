"""Hostile input to every parser of Slurm output and of gimbal metadata (issue #14).

Each parser gets 10,000 hypothesis examples in CI (``FUZZ``, ``GIMBAL_FUZZ_EXAMPLES`` set by
``.ci/run``; a count, not a time budget; 1,000 in a developer's run) of
arbitrary bytes, huge fields, missing keys and values of the wrong type, built on the
recorded 22.05 and 26.05 output.  Properties: no exception escapes except the parser's
own :class:`SlurmParseError` for a document that is not Slurm output at all; a bad record
is skipped with exactly one warning naming it, or repaired with its problems listed; every
text field that comes out is printable, bounded and encodable as UTF-8 (so it can be
printed, logged and stored in SQLite/PostgreSQL).
"""
from __future__ import annotations

import os
import json
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gimbalctl.slurm.cli import CliBackend
from gimbalctl.slurm.errors import SlurmParseError
from gimbalctl.slurm.meta import KNOWN, parse_meta
from gimbalctl.slurm.parse import (jobs_from_squeue_json, nodes_from_json, parse_gres_detail,
                                   parse_gres_spec, parse_sprio, parse_version)
from gimbalctl.slurm.sanitize import LIMITS, _bad
from gimbalctl.slurm.types import SlurmJob

from tests.slurm_unit.replay import FIX, RELEASES

# .ci/run exports GIMBAL_FUZZ_EXAMPLES=10000 (the acceptance count); a developer's run (and the
# landing check) uses 1,000 per parser
FUZZ = settings(max_examples=int(os.environ.get("GIMBAL_FUZZ_EXAMPLES", 1_000)), deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

JOBS = {r: json.loads((FIX / r / "squeue.json").read_text())["jobs"] for r in RELEASES}
NODES = {r: json.loads((FIX / r / "nodes.json").read_text())["nodes"] for r in RELEASES}
MB = "n" * (1 << 20)  # a job name of 1 MB (built once; referenced, not generated)

# text an attacker can get into a field: anything decodable, undecodable bytes as Slurm
# passes them (decoded with errors="replace" like the CLI backend), controls, huge values
nasty_text = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40).map(lambda b: b.decode("utf-8", errors="replace")),
    st.text(alphabet=st.characters(max_codepoint=0x9f), max_size=20),
    st.sampled_from([MB, "\n" * 5000, "gimbal:app=bert,est=1", "JS1:H4sIAAAAAAAA" + "A" * 3000,
                     "gimbal:v1;app=bert;est=0.001;gpus=99999", "\x00", "\ud800", "(null)"]))
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                        st.floats(allow_nan=True, allow_infinity=True), nasty_text)
json_value = st.one_of(json_scalar, st.lists(json_scalar, max_size=3),  # wrong types, shallow:
                       st.dictionaries(st.sampled_from(["set", "infinite", "number", "x"]),
                                       json_scalar, max_size=3))  # 26.05 number objects


@st.composite
def mutated(draw, base: list, extra_keys=("job_id", "name", "comment", "admin_comment",
                                          "gres_detail", "nodes", "job_state", "time_limit")):
    rec = dict(draw(st.sampled_from(base)))  # top-level keys are replaced, never mutated
    keys = sorted(set(rec) | set(extra_keys))
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        k = draw(st.sampled_from(keys))
        if draw(st.booleans()):
            rec.pop(k, None)
        else:
            rec[k] = draw(json_value)
    return rec


def _clean(v, limit=max(LIMITS.values())) -> bool:
    if not isinstance(v, str):
        return True
    v.encode("utf-8")  # raises on a lone surrogate
    return len(v) <= limit and not any(_bad(c) for c in v)


def _check_job(j: SlurmJob) -> None:
    assert j.job_id.isdigit()
    for f in ("name", "user", "state", "reason", "partition", "comment", "admin_comment"):
        assert _clean(getattr(j, f)), (f, getattr(j, f)[:80])
    assert all(_clean(n, 256) for n in j.nodes + j.req_nodes)
    assert isinstance(j.priority, int) and isinstance(j.submit_time, float)
    assert all(isinstance(v, int) and 0 <= v <= 1 << 31 for v in j.gres_req.values())
    json.dumps(j.as_dict(), default=str)  # what the daemon records


def _check_jobs_doc(records: list) -> None:
    warnings: list[str] = []
    out = jobs_from_squeue_json({"jobs": records}, warnings=warnings)
    assert len(out) + len(warnings) == len(records)  # each bad record: exactly one warning
    for j in out:
        _check_job(j)
    for w in warnings:
        assert "skipped" in w and _clean(w, 10_000)
        assert "job " in w or "record #" in w


def test_fuzz_squeue_json_records():
    """22.05 and 26.05 records (plain numbers and number objects) mixed in one document."""
    @FUZZ
    @given(st.lists(mutated(JOBS["22.05"] + JOBS["26.05"]), min_size=1, max_size=2))
    def run(records):
        _check_jobs_doc(records)
    run()


@pytest.mark.parametrize("release", RELEASES)
def test_fuzz_squeue_json_bytes_through_the_cli_backend(release):
    """Raw bytes inside the JSON text, as squeue 22.05 prints a job name of
    ``a\\xff\\xfeb\\xc3``: the CLI backend reads every job, repairs the field and says so."""
    doc = json.loads((FIX / release / "squeue.json").read_text())
    doc["jobs"] = [j for j in doc["jobs"] if j["name"]][-4:]  # small document: fast examples
    text = json.dumps(doc, indent=1).encode()
    names = [j["name"].encode() for j in doc["jobs"]]
    n_jobs = len(doc["jobs"])
    version = (FIX / release / "sinfo-V.txt").read_text()
    sprio = (FIX / release / "sprio.txt").read_text()

    @FUZZ
    @given(st.sampled_from(names), st.binary(min_size=1, max_size=64))
    def run(name, junk):
        junk = junk.replace(b'"', b"").replace(b"\\", b"")
        data = text.replace(b'"name": "' + name + b'"', b'"name": "' + junk + b'"', 1)

        def runner(argv, timeout):
            out = {"sinfo": version, "squeue": data.decode("utf-8", errors="replace"),
                   "sprio": sprio}[argv[0]]
            return subprocess.CompletedProcess(argv, 0, out, "")
        be = CliBackend(runner=runner)
        jobs = be.jobs()  # raw control bytes and invalid UTF-8 inside a string: still JSON
        assert len(jobs) + len(be.read_warnings) == n_jobs
        for j in jobs:
            _check_job(j)
    run()


def test_fuzz_node_json():
    @FUZZ
    @given(st.lists(mutated(NODES["22.05"] + NODES["26.05"], extra_keys=("name", "state", "gres", "partitions",
                                                        "state_flags")), max_size=2))
    def run(records):
        warnings: list[str] = []
        out = nodes_from_json({"nodes": records}, warnings=warnings)
        assert len(out) + len(warnings) <= len(records)
        for n in out:
            assert _clean(n.name, 256) and _clean(n.state, 256)
            assert all(isinstance(v, int) for v in n.gres.values())
        for w in warnings:
            assert w.startswith("node record #") and _clean(w, 10_000)
    run()


def test_fuzz_documents_that_are_not_slurm_output():
    @FUZZ
    @given(json_value)
    def run(doc):
        for parse in (lambda d: jobs_from_squeue_json(d, warnings=[]),
                      lambda d: nodes_from_json(d, warnings=[])):
            try:
                parse(doc)
            except SlurmParseError:
                pass
    run()


def test_fuzz_sprio():
    line = st.one_of(
        st.text(max_size=60),
        st.tuples(st.integers(0, 10**6), st.integers(-10, 10**6), json_scalar, st.text(max_size=5))
        .map(lambda t: "|".join(map(str, t))))

    @FUZZ
    @given(st.lists(line, max_size=6))
    def run(lines):
        warnings: list[str] = []
        out = parse_sprio("\n".join(lines), warnings)
        assert all(k.isdigit() and isinstance(v, int) for k, v in out.items())
        assert len(warnings) <= len("\n".join(lines).splitlines())
        assert all(w.startswith("sprio line") for w in warnings)
    run()


def test_fuzz_gres_detail_and_spec():
    gres = st.one_of(
        st.text(max_size=60),
        st.tuples(st.sampled_from(["gpu", "shard", "mps", "gpu:a100", "x"]),
                  st.integers(0, 10**12), st.text(alphabet="IDX:0123456789-,/() ", max_size=20))
        .map(lambda t: f"{t[0]}:{t[1]}({t[2]})"))

    @FUZZ
    @given(gres)
    def run(text):
        for parse in (lambda t: parse_gres_detail(t, "gpu1"), parse_gres_spec):
            try:
                parse(text)
            except SlurmParseError:
                pass
    run()


def test_fuzz_version():
    @FUZZ
    @given(nasty_text)
    def run(text):
        try:
            v = parse_version(text)
        except SlurmParseError:
            return
        assert len(v) == 3 and all(isinstance(x, int) for x in v)
    run()


meta_text = st.one_of(
    nasty_text,
    st.lists(st.tuples(st.sampled_from(KNOWN + ("colour", "", "APP")), nasty_text), max_size=8)
    .map(lambda kv: "gimbal:v1;" + ";".join(f"{k}={v}" for k, v in kv)),
    st.lists(st.tuples(st.sampled_from(KNOWN), nasty_text), max_size=8)
    .map(lambda kv: "gimbal:" + ",".join(f"{k}={v}" for k, v in kv)))


def test_fuzz_gimbal_metadata():
    """AdminComment text: valid values parse, anything else is dropped with one warning per
    bad key naming it; never an exception, never an out-of-range value."""
    @FUZZ
    @given(meta_text)
    def run(text):
        m = parse_meta(text)
        assert m.gpus is None or 1 <= m.gpus <= 1024
        assert m.batch is None or m.batch >= 1
        for x in (m.est, m.iters, m.deadline):
            assert x is None or 0 < x < float("inf")
        assert m.app is None or (m.app.isascii() and m.app.strip() == m.app)
        assert all(w.startswith("admin_comment: ") for w in m.warnings)
        assert not m.tagged or text.find("gimbal:") >= 0
        json.dumps(m.as_dict())
    run()


def test_meta_ignores_js1_and_the_user_comment():
    """jobstats' summary is not gimbal metadata (and not worth a warning)."""
    m = parse_meta("JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTtVRKi1OLUrNS05VslIqS8wpTgUA")
    assert not m.tagged and not m.warnings
    j = jobs_from_squeue_json({"jobs": [dict(JOBS["22.05"][0], comment="gimbal:app=bert,est=1",
                                             admin_comment="")]}, warnings=[])[0]
    assert not j.meta.tagged  # the user Comment is never read
