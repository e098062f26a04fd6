"""The standard-library trace reader (:func:`gimbalctl.traces.load_trace`) against the
pandas reader (:func:`gimbalctl.traces_pandas.load_trace_pandas`): every trace shipped
in the repository, and generated well-formed and malformed CSVs, give equal job lists,
or are rejected by both (with the same message where the two agree on how to name the
problem; see ``_same_rejection``)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.traces import TraceError, load_trace, read_table
from gimbalctl.traces_pandas import load_trace_pandas

ROOT = Path(__file__).resolve().parents[1]
M = default_models()
# every CSV in the repository (bundled traces and the tables beside them: both readers
# must also reject the non-trace ones alike)
REPO_CSVS = sorted(p for p in ROOT.rglob("*.csv") if ".git" not in p.parts)
# the shared trace collection when this machine has it (the Philly trace is read by
# pandas on both paths, so it is left out)
SHARED = next((d / "traces" for d in (Path(os.environ.get("GIMBAL_SHARED", ROOT.parent / "shared")),
                                      Path("/work/shared")) if (d / "traces").is_dir()), ROOT / "-")
SHARED_CSVS = sorted(p for p in SHARED.rglob("*.csv") if "philly" not in p.parts) \
    if SHARED.is_dir() else []
STRUCTURAL = ("not a readable CSV", "more fields than the header", "quoted field is not closed")


def both(path, **kw):
    """(stdlib result, pandas result): a job list or the TraceError raised."""
    out = []
    for fn in (load_trace, load_trace_pandas):
        try:
            out.append(fn(path, models=M, **kw))
        except TraceError as e:
            out.append(e)
    return out


def _same_rejection(a: TraceError, b: TraceError, exact_lines: bool) -> bool:
    """pandas names a row with too many fields after the first, and a quote left open,
    only as an unreadable CSV; the stdlib reader names the row.  Other errors read the
    same, except that pandas' line numbers skip blank-looking lines the stdlib reader
    counts (see gimbalctl.traces), so lines are compared only where ``exact_lines``."""
    if any(s in b.problem for s in STRUCTURAL):
        return any(s in a.problem for s in STRUCTURAL)
    if exact_lines:
        return str(a) == str(b)
    return (a.column, a.problem) == (b.column, b.problem)


def assert_same(path, exact_lines=True, **kw):
    a, b = both(path, **kw)
    if isinstance(b, TraceError) or isinstance(a, TraceError):
        assert isinstance(a, TraceError) and isinstance(b, TraceError), (a, b)
        assert _same_rejection(a, b, exact_lines), (str(a), str(b))
        return a
    assert a == b
    return a


@pytest.mark.parametrize("path", REPO_CSVS + SHARED_CSVS, ids=lambda p: p.name)
def test_shipped_csvs_read_alike(path):
    jobs = assert_same(path)
    if not isinstance(jobs, TraceError):
        assert_same(path, seed=7, limit=25, nodes=parse_cluster("8x8"))


def test_bundled_workloads_are_read_without_pandas():
    bundled = [p for p in REPO_CSVS if "pollux" in p.parts]
    assert len(bundled) == 8
    for p in bundled:
        assert len(assert_same(p)) == 160


# ------------------------------------------------------------------ generated traces

NUMBER = st.one_of(
    st.integers(0, 10 ** 6).map(str),
    st.floats(0, 1e7, allow_nan=False).map(repr),
    st.sampled_from(["1e3", "2.5E+02", ".5", "5.", "+7", "007", " 3", "4 ", "\t6"]),
)
BAD_NUMBER = st.sampled_from(["", "x", "nan", "NaN", "inf", "-inf", "-1", "0", "-0", "1.5",
                              "1_0", "\u0663", "1e400", "1e", "0x1", "True", "1,5", "2 3",
                              "18446744073709551616", "9223372036854775808", "-0.0", "1e-400"])
CELL = st.one_of(NUMBER, NUMBER, NUMBER, BAD_NUMBER)
TEXT = st.text(st.sampled_from("abcxyz019-_ ."), max_size=6)
APP = st.one_of(st.sampled_from(APPS), st.sampled_from(["", "gpt9", "BERT", " bert"]))
MODEL = st.sampled_from(["vgg19", "bert", "resnet50", "dqn", "lstm", "yolo", "", "ResNet-18"])

KINDS = {
    "pollux": (["name", "time", "application", "num_replicas", "batch_size"], []),
    "tiresias": (["job_id", "num_gpu", "submit_time", "duration"],
                 ["iterations", "model_name", "interval"]),
    "muri": (["job_id", "num_gpu", "submit_time", "duration", "iteration_time",
              "resource_time_0"], ["model_name", "batch_size"]),
    "generic": (["id", "submit_time", "num_gpus"],
                ["duration", "iterations", "app", "batch_size", "user", "deadline", "group",
                 "min_gpus", "max_gpus", "min_batch", "max_batch"]),
}


def _cell(col: str):
    if col in ("name", "job_id", "id"):
        return st.one_of(st.integers(0, 30).map(lambda i: f"j{i}"), st.sampled_from(["", " ", "j1 "]))
    if col in ("application", "app"):
        return APP
    if col == "model_name":
        return MODEL
    if col in ("user", "group"):
        return TEXT
    if col == "deadline":
        return st.one_of(st.just(""), NUMBER, BAD_NUMBER)
    if col in ("num_replicas", "num_gpu", "num_gpus"):
        return st.one_of(st.integers(1, 16).map(str), BAD_NUMBER, st.sampled_from(["2.0", "+3"]))
    if col in ("min_gpus", "max_gpus", "min_batch", "max_batch"):
        return st.one_of(st.sampled_from(["1", "2", "4", "32", "512", "0", "", "3.5"]), BAD_NUMBER)
    if col == "batch_size":
        return st.one_of(st.sampled_from(["32", "128", "256", "1024", "4096", "24"]), BAD_NUMBER)
    return CELL


def _quote(s: str) -> str:
    return '"' + s.replace('"', '""') + '"' if ("," in s or '"' in s) else s


@st.composite
def traces(draw, clean=False):
    """A trace of a random kind; ``clean``: valid rows of the header's width."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    req, opt = KINDS[kind]
    cols = req + (draw(st.lists(st.sampled_from(opt), unique=True)) if opt else [])
    cols = draw(st.permutations(cols))
    if not clean and draw(st.integers(0, 9)) == 0:  # a required column missing
        cols = cols[:-1]
    n = draw(st.integers(1, 12))
    valid = clean or draw(st.booleans())  # valid rows vs anything goes
    lines = [",".join(cols)]
    for _ in range(n):
        if valid:
            row = [draw(st.sampled_from(_valid(col, len(lines)))) for col in cols]
        else:
            row = [draw(_cell(c)) for c in cols]
        shape = draw(st.integers(2 if clean else 0, 19))
        if shape == 0:
            row = row[:-1]  # short row: padded with an empty field
        elif shape == 1:
            row = row + ["9"]  # one field too many
        elif shape == 2:
            lines.append(draw(st.sampled_from(["", " ", "\t", " \t "])))  # skipped
        lines.append(",".join(_quote(c) if draw(st.integers(0, 9)) else f'"{c}"' for c in row))
    end = draw(st.sampled_from(["\n", "\r\n", ""]))
    return (end or "\n").join(lines) + end


def _valid(col: str, k: int) -> list[str]:
    return {"name": [f"j{k}"], "job_id": [f"j{k}"], "id": [f"j{k}"],
            "application": list(APPS), "app": list(APPS) + [""], "model_name": ["vgg19", "dqn", ""],
            "user": ["u1", "u2"], "group": ["", "g"], "deadline": ["", "5000", "-3.5"],
            "num_replicas": ["1", "2", "8"], "num_gpu": ["1", "4"], "num_gpus": ["1", "3"],
            "batch_size": ["32", "128", "512"], "time": ["0", "10", "2.5"],
            "submit_time": ["0", "100", "7.25"], "duration": ["60", "3600.5"],
            "iterations": ["100", "5e3"], "min_gpus": ["1"], "max_gpus": ["3", "4", "2"],
            "min_batch": ["32"], "max_batch": ["512", "4096"]}.get(col, ["1", "2"])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=traces(), seed=st.integers(0, 3), limit=st.one_of(st.none(), st.integers(1, 5)))
def test_generated_traces_read_alike(tmp_path_factory, text, seed, limit):
    p = tmp_path_factory.mktemp("t") / "t.csv"
    p.write_text(text, newline="")
    assert_same(p, seed=seed, limit=limit)


@st.composite
def mutated(draw):
    """A generated trace with a few characters inserted anywhere: quotes, line breaks,
    blank-looking lines, spaces, delimiters."""
    text = draw(traces(clean=True))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(
            ['"', '""', "\r", "\n", "\r\n", " ", "\t", "\x0c", "\n\n", " \n", ",", "e", "."])) + text[at:]
    return text


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
def test_mutated_traces_read_alike(tmp_path_factory, text):
    """Both readers accept the same files and give the same jobs; line numbers may
    differ (see _same_rejection)."""
    # pandas' tokenizer drops a delimiter that directly follows a skipped blank line
    # ended by a lone carriage return (its EAT_CRNL_NOP state), shifting that row's
    # fields; the stdlib reader keeps the field
    assume(not re.search(r"(?:^|[\r\n])[ \t]*\r(?!\n),", text))
    p = tmp_path_factory.mktemp("g") / "g.csv"
    p.write_text(text, newline="")
    assert_same(p, exact_lines=False)


def test_reader_follows_pandas_header_rules(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("\ufeffa,a,a.1,,b\n1,2,3,4,5\n")
    assert read_table(p).names == ["a", "a.2", "a.1", "Unnamed: 3", "b"]


@pytest.mark.parametrize("text,where", [
    # a later row with too many fields: pandas says only "Error tokenizing data"
    ("id,submit_time,num_gpus,duration\na,0,1,5\nb,0,1,5,6\n", ":3: more fields than the header"),
    ('id,submit_time,num_gpus,duration\na,0,1,5\n"b,0,1,5\n',
     ":3: a quoted field is not closed"),
    # lines count as the file's own lines, multi-line quoted fields included
    ('id,submit_time,num_gpus,duration,user\na,0,1,5,"x\ny"\nb,0,1,-5,z\n', ":4: column 'duration'"),
    ("\n\nid,submit_time,num_gpus\na,0,1\n", ":3: column 'duration'"),
])
def test_stdlib_reader_names_the_line(tmp_path, text, where):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(p) in str(e.value) and where in str(e.value)


def test_ambiguous_column_after_renaming(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("id,jid,submit_time,num_gpus,duration\na,b,0,1,5\n")
    with pytest.raises(TraceError, match=r":1: column 'id': more than one column"):
        load_trace(p, columns={"jid": "id"})


def test_philly_and_sacct_go_to_pandas_alike(tmp_path):
    """Philly and sacct traces (timestamps) are read by the pandas reader on both paths,
    found from the header alone, also after renaming columns."""
    from test_traces import SACCT

    philly = tmp_path / "p.csv"
    philly.write_text("ts,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,600.0,1,600,a\n"
                      "2017-10-09 06:13:03,3600,8,28800,b\n")
    sacct = tmp_path / "s.txt"
    sacct.write_text(SACCT)
    kw = dict(columns={"ts": "timestamp"}, seed=2)
    assert len(assert_same(philly, **kw)) == 2
    assert len(assert_same(sacct)) == 2
    assert "timestamp" in str(both(philly)[0])  # without the mapping: no timestamp column
