import json
import os

import pytest

from launcher.decision import (DecisionError, LauncherDecision, decision_path, read_decision,
                               write_decision)

FULL = {"version": 1, "job_id": "123", "policy": "sjf-bsbf", "sub_batch": 16, "accum_steps": 4,
        "global_batch": 64, "mps_thread_pct": 50, "mps_mem_limit_mb": 8000, "stealing": True,
        "share_with": "122", "written_at": "2024-05-01T10:00:00+00:00"}


def test_roundtrip(tmp_path):
    p = decision_path("123", str(tmp_path))
    assert p == os.path.join(str(tmp_path), "decisions", "123.json")
    d = LauncherDecision.from_dict(FULL)
    write_decision(p, d)
    assert read_decision(p) == d
    assert json.load(open(p)) == FULL
    assert os.listdir(os.path.dirname(p)) == ["123.json"]  # no temp file left


def test_minimal_and_written_at_filled(tmp_path):
    p = str(tmp_path / "7.json")
    write_decision(p, LauncherDecision(job_id="7"))
    d = read_decision(p)
    assert d.job_id == "7" and d.sub_batch is None and d.written_at is not None


def test_unknown_keys_ignored_numeric_job_id(tmp_path):
    p = tmp_path / "1.json"
    p.write_text(json.dumps({"version": 1, "job_id": 1, "future_field": [1, 2]}))
    assert read_decision(str(p)).job_id == "1"


@pytest.mark.parametrize("field,value", [
    ("sub_batch", 0), ("sub_batch", "16"), ("mps_thread_pct", 150), ("mps_mem_limit_mb", -1),
    ("stealing", "yes"), ("version", 2), ("written_at", "yesterday"), ("job_id", ""),
    ("accum_steps", 1.5),
])
def test_validation_names_file_and_field(tmp_path, field, value):
    p = tmp_path / "123.json"
    p.write_text(json.dumps({**FULL, field: value}))
    with pytest.raises(DecisionError) as ei:
        read_decision(str(p))
    assert str(p) in str(ei.value) and field in str(ei.value)


def test_missing_required(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"job_id": "1"}))
    with pytest.raises(DecisionError, match="version"):
        read_decision(str(p))
    p.write_text("{not json")
    with pytest.raises(DecisionError, match="not valid JSON"):
        read_decision(str(p))


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    p = str(tmp_path / "123.json")
    write_decision(p, LauncherDecision(job_id="123", sub_batch=8))

    def boom(*a):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_decision(p, LauncherDecision(job_id="123", sub_batch=4))
    monkeypatch.undo()
    assert read_decision(p).sub_batch == 8
    assert os.listdir(tmp_path) == ["123.json"]


def test_merged_flags_win():
    d = LauncherDecision.from_dict(FULL)
    m = d.merged(sub_batch=8, stealing=False, mps_thread_pct=None)
    assert m.sub_batch == 8 and m.stealing is False and m.mps_thread_pct == 50
    with pytest.raises(DecisionError):
        d.merged(mps_thread_pct=0)


def test_frozen():
    d = LauncherDecision(job_id="1")
    with pytest.raises(Exception):
        d.sub_batch = 3


def test_non_utf8_file_is_a_decision_error(tmp_path):
    p = tmp_path / "123.json"
    p.write_bytes(b'{"version": 1, "job_id": "\xff"}')
    with pytest.raises(DecisionError) as ei:
        read_decision(str(p))
    assert str(p) in str(ei.value) and "UTF-8" in str(ei.value)
