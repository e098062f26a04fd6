"""slurm_hooks/job_submit.lua under a real Lua interpreter (5.1 is what Debian's Slurm 22.05
and 26.05 link) with a fake `slurm` table (fake_slurm.lua)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest
from hypothesis import given, settings, strategies as st

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parents[1] / "slurm_hooks" / "job_submit.lua"
LUAS = [x for x in ("lua5.1", "lua5.3", "lua5.4") if shutil.which(x)]
EINVAL = 22
ESLURM_ACCESS_DENIED = 2002  # as in fake_slurm.lua

if not LUAS:
    pytest.skip("no lua5.x interpreter (apt-get install lua5.1)", allow_module_level=True)


def run_lua(cases: List[Tuple], lua: str = LUAS[0]):
    """[(mode, comment[, job's current admin_comment])] -> [(rc, admin_comment, user_message)]"""
    enc = lambda c: "-" if c is None else (c.encode().hex() or "~")
    stdin = "".join(f"{c[0]} {enc(c[1])}" + (f" {enc(c[2])}" if len(c) > 2 else "") + "\n"
                    for c in cases)
    proc = subprocess.run([lua, str(HERE / "fake_slurm.lua"), str(SCRIPT)], input=stdin,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        assert not line.startswith("crash"), bytes.fromhex(line.split()[1]).decode()
        f = dict(kv.split("=", 1) for kv in line.split())
        dec = lambda v: None if v == "-" else bytes.fromhex(v).decode("utf-8", "replace")
        out.append((int(f["rc"]), dec(f["admin"]), dec(f["user"])))
    assert len(out) == len(cases)
    return out


def one(comment, mode="submit", lua=LUAS[0], current=None):
    return run_lua([(mode, comment) + ((current,) if current is not None else ())], lua)[0]


@pytest.mark.parametrize("lua", LUAS)
def test_valid_comment_is_normalized(lua):
    rc, admin, msg = one("gimbal:est=3600,iters=1000,batch=064,app=bert", lua=lua)
    assert rc == 0 and msg is None
    assert admin == "gimbal:v1;app=bert;batch=64;iters=1000;est=3600"


def test_all_keys_in_fixed_order():
    rc, admin, _ = one("gimbal:gpus=2,gate=1,deadline=1767225600,share=no,est=5,iters=7,batch=1,"
                       "app=a_b-9")
    assert rc == 0
    assert admin == ("gimbal:v1;app=a_b-9;batch=1;iters=7;est=5;share=no;"
                     "deadline=1767225600;gate=1;gpus=2")


@pytest.mark.parametrize("lua", LUAS)
@pytest.mark.parametrize("raw,norm", [("1", "1"), ("8", "8"), ("0016", "16"), ("1024", "1024"),
                                      ("0001024", "1024")])
def test_gpus_key_is_normalized(lua, raw, norm):
    """gpus=N (1..1024): the GPU count of a gate job submitted without GRES."""
    rc, admin, msg = one(f"gimbal:app=bert,gate=1,gpus={raw}", lua=lua)
    assert (rc, msg) == (0, None)
    assert admin == f"gimbal:v1;app=bert;gate=1;gpus={norm}"


@pytest.mark.parametrize("lua", LUAS)
def test_stages_key_is_normalized(lua):
    """stages=N (1..64): pipeline stages of a seed 003 Table I model."""
    rc, admin, msg = one("gimbal:stages=02,app=vgg19,gpus=4,gate=1", lua=lua)
    assert (rc, msg) == (0, None)
    assert admin == "gimbal:v1;app=vgg19;gate=1;gpus=4;stages=2"


@pytest.mark.parametrize("comment", [None, "", "hello", "my gimbal:app=x", "x" * 5000])
def test_non_gimbal_comments_pass_untouched(comment):
    assert one(comment) == (0, None, None)


@pytest.mark.parametrize("comment,needle", [
    ("gimbal:", "no gimbal options"),
    ("gimbal:batch=4", "'app' is required"),
    ("gimbal:app=Bert", "app must be"),
    ("gimbal:app=" + "a" * 33, "app must be"),
    ("gimbal:app=x,batch=0", "batch must be an integer > 0"),
    ("gimbal:app=x,batch=-1", "batch must be"),
    ("gimbal:app=x,batch=1.5", "batch must be"),
    ("gimbal:app=x,iters=1e3", "iters must be"),
    ("gimbal:app=x,est=1234567890123", "est must be"),
    ("gimbal:app=x,share=maybe", "share must be yes or no"),
    ("gimbal:app=x,deadline=soon", "deadline must be"),
    ("gimbal:app=x,gate=2", "gate must be 0 or 1"),
    ("gimbal:app=x,gpus=0", "gpus must be an integer from 1 to 1024"),
    ("gimbal:app=x,gpus=1025", "gpus must be an integer from 1 to 1024"),
    ("gimbal:app=x,gpus=99999999", "gpus must be an integer from 1 to 1024"),
    ("gimbal:app=x,gpus=2.5", "gpus must be"),
    ("gimbal:app=x,gpus=-2", "gpus must be"),
    ("gimbal:app=x,gpus=", "gpus must be"),
    ("gimbal:app=x,gpus=2,gpus=3", "'gpus' given twice"),
    ("gimbal:app=x,stages=0", "stages must be an integer from 1 to 64"),
    ("gimbal:app=x,stages=65", "stages must be an integer from 1 to 64"),
    ("gimbal:app=x,stages=two", "stages must be"),
    ("gimbal:app=x,,batch=1", "empty option"),
    ("gimbal:app=x,", "empty option"),
    ("gimbal:app=x,batch", "is not key=value"),
    ("gimbal:app=x;batch=1", "app must be"),
    ("gimbal:app=x,colour=red", "unknown gimbal option 'colour'"),
    ("gimbal:app=x,app=y", "'app' given twice"),
    ("gimbal: app=x", "is not key=value"),
    ("Gimbal:app=x", "must start with exactly 'gimbal:'"),
    ("gimbal app=x", "must start with exactly 'gimbal:'"),
    ("gimbal:app=x,batch=" + "1" * 600, "longer than 512"),
])
def test_malformed_is_rejected_with_message(comment, needle):
    rc, admin, msg = one(comment)
    assert rc == EINVAL
    assert admin is None
    assert msg.startswith("gimbal: invalid job comment: ")
    assert needle in msg, msg
    assert "Expected gimbal:app=NAME" in msg


def test_modify_validates_and_renews_tag():
    assert one("gimbal:app=gpt2,iters=5", mode="modify_root") == \
        (0, "gimbal:v1;app=gpt2;iters=5", None)
    rc, admin, msg = one("gimbal:app=gpt2,iters=x", mode="modify_root")
    assert rc == EINVAL and admin is None and "iters must be" in msg
    # modifications that do not touch the comment (priority, hold, admin_comment...) pass
    assert one(None, mode="modify") == (0, None, None)
    assert one("just a note", mode="modify") == (0, None, None)


def test_user_cannot_change_metadata_after_submission():
    """Issue #14 item 4: a user's `scontrol update comment=gimbal:...` is refused as a whole
    (before: the tag was set, slurmctld denied only the AdminComment part and the Comment
    changed anyway)."""
    rc, admin, msg = one("gimbal:app=bert,est=7", mode="modify")
    assert rc == ESLURM_ACCESS_DENIED and admin is None
    assert "fixed at submission" in msg


def test_modify_never_overwrites_another_tools_admin_comment():
    """Issue #14 item 12: a jobstats JS1: summary in AdminComment is kept."""
    rc, admin, msg = one("gimbal:app=bert", mode="modify_root", current="JS1:H4sIAAAA")
    assert rc == ESLURM_ACCESS_DENIED and admin is None and "another tool" in msg
    assert one("gimbal:app=bert", mode="modify_root", current="gimbal:v1;app=x") == \
        (0, "gimbal:v1;app=bert", None)


def test_percent_signs_do_not_break_log_user():
    rc, _, msg = one("gimbal:app=%s%d%n")
    assert rc == EINVAL and "%s%d%n" in msg


_app = st.from_regex(r"[a-z0-9_-]{1,32}", fullmatch=True)
_pos = st.integers(min_value=1, max_value=10**12 - 1)


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({"app": _app}, optional={
    "batch": _pos, "iters": _pos, "est": _pos, "deadline": _pos,
    "share": st.sampled_from(["yes", "no"]), "gate": st.sampled_from(["0", "1"]),
    "gpus": st.integers(min_value=1, max_value=1024)}),
    st.randoms(use_true_random=False))
def test_property_valid_options_roundtrip(opts, rnd):
    items = [f"{k}={v}" for k, v in opts.items()]
    rnd.shuffle(items)
    rc, admin, msg = one("gimbal:" + ",".join(items))
    assert rc == 0 and msg is None
    order = ["app", "batch", "iters", "est", "share", "deadline", "gate", "gpus"]
    expect = ";".join(["gimbal:v1"] + [f"{k}={opts[k]}" for k in order if k in opts])
    assert admin == expect


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=25))
def test_property_never_crashes(comments):
    """Any comment: either accepted (0, tag starts gimbal:v1) or rejected (22, message), or
    untouched; never a Lua error."""
    comments = [c.replace("\n", " ") for c in comments]
    comments += ["gimbal:" + c for c in comments]
    for c, (rc, admin, msg) in zip(comments, run_lua([("submit", c) for c in comments])):
        if rc == 0:
            assert admin is None or admin.startswith("gimbal:v1;app=")
        else:
            assert rc == EINVAL and msg.startswith("gimbal: invalid job comment")


def test_script_has_no_io():
    src = SCRIPT.read_text()
    for bad in ("os.", "io.", "dofile", "loadfile", "loadstring"):
        assert bad not in src
    assert not re.search(r"\brequire\s*[(\"']", src)


@pytest.mark.parametrize("lua", LUAS)
def test_batchrange_is_validated_and_normalized(lua):
    """gsbatch --allow-batch-change: batchrange=MIN:MAX with the submitted batch inside it."""
    rc, admin, msg = one("gimbal:batchrange=032:0512,app=bert,batch=64", lua=lua)
    assert (rc, msg) == (0, None)
    assert admin == "gimbal:v1;app=bert;batch=64;batchrange=32:512"
    for comment, needle in (
            ("gimbal:app=bert,batchrange=32:512", "batchrange needs batch"),
            ("gimbal:app=bert,batch=8,batchrange=32:512", "batch 8 is outside batchrange 32:512"),
            ("gimbal:app=bert,batch=64,batchrange=512:32", "batchrange must be MIN:MAX"),
            ("gimbal:app=bert,batch=64,batchrange=0:64", "batchrange must be MIN:MAX"),
            ("gimbal:app=bert,batch=64,batchrange=64", "batchrange must be MIN:MAX"),
            ("gimbal:app=bert,batch=64,batchrange=1:2000000", "batchrange must be MIN:MAX"),
            ("gimbal:app=bert,batch=64,batchrange=32:512,batchrange=1:9", "given twice")):
        rc, admin, msg = one(comment, lua=lua)
        assert rc == EINVAL and admin is None and needle in msg, (comment, msg)
