"""`gimbalctl db upgrade`: --dry-run lists pending migrations and changes nothing."""
import json

from click.testing import CliRunner

from gimbalctl.cli import main


def run(*args):
    return CliRunner().invoke(main, ["db", "upgrade", *args])


def test_dry_run_then_apply(tmp_path):
    db = tmp_path / "g.db"
    r = run("--db", str(db), "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["dry_run"] and d["from"] is None and d["migrations"][0] == "0001"
    assert not db.exists(), "a dry run must not create the database file"
    r = run("--db", str(db), "--json")
    applied = json.loads(r.output)
    assert applied["migrations"] == d["migrations"] and applied["revision"] == d["migrations"][-1]
    r = run("--db", str(db), "--dry-run", "--json")
    assert json.loads(r.output)["migrations"] == []


def test_unknown_revision_is_a_clear_error(tmp_path):
    r = run("--db", str(tmp_path / "g.db"), "--revision", "nope")
    assert r.exit_code == 4
    assert "--revision 'nope'" in r.output
