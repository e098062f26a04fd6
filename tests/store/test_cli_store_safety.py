"""CLI and the state store: dry runs create/migrate nothing; a store that cannot be opened or
written is a clear error with exit 4 (docs/daemon.md), never a traceback.

Slurm is replaced by the recorded 22.05 fixtures (no cluster needed).
"""
import sqlite3

import pytest
from click.testing import CliRunner

from gimbalctl import cli_slurm
from gimbalctl.cli import main
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.store import Store
from tests.slurm_unit.replay import Replay


@pytest.fixture
def replay(monkeypatch):
    r = Replay("22.05")
    monkeypatch.setattr(cli_slurm, "_backend", lambda cfg: CliBackend(runner=r, partition="gpu"))
    return r


def run(*args, tmp_path):
    return CliRunner().invoke(main, [*args], env={"GIMBAL_STATE_DIR": str(tmp_path / "state")})


@pytest.mark.parametrize("cmd", [("daemon", "--dry-run", "--policy", "sjf"), ("revert", "--dry-run")])
def test_dry_run_does_not_create_the_database(cmd, replay, tmp_path):
    db = tmp_path / "g.db"
    r = run(*cmd, "--db", str(db), tmp_path=tmp_path)
    assert r.exit_code == 0, r.output
    assert not db.exists(), "a dry run must not create the state store"
    assert replay.mutations() == []


def test_dry_run_does_not_migrate_an_old_database(replay, tmp_path):
    db = tmp_path / "g.db"
    st = Store(str(db))
    st.upgrade("0001")
    r = run("daemon", "--dry-run", "--policy", "sjf", "--db", str(db), tmp_path=tmp_path)
    assert Store(str(db)).revision() == "0001", "a dry run must not migrate the state store"
    assert r.exit_code == 4
    assert "db upgrade" in r.output


def test_read_only_database_is_exit_4_with_the_url(replay, tmp_path):
    db = tmp_path / "g.db"
    Store(str(db)).upgrade()
    url = f"sqlite:///file:{db}?mode=ro&uri=true"
    r = run("daemon", "--once", "--policy", "sjf", "--db", url, tmp_path=tmp_path)
    assert r.exit_code == 4, r.output
    assert "state store" in r.output and "readonly" in r.output
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit)
    assert replay.mutations() == []
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from cycles").fetchone()[0] == 0


def test_bad_db_url_is_exit_4_naming_it(replay, tmp_path):
    r = run("daemon", "--once", "--policy", "sjf", "--db", "postgresql://u@h:notaport/db",
            tmp_path=tmp_path)
    assert r.exit_code == 4, r.output
    assert "--db" in r.output and "notaport" in r.output


def test_database_of_an_unknown_revision_is_exit_4(replay, tmp_path):
    db = tmp_path / "g.db"
    con = sqlite3.connect(db)
    con.execute("create table alembic_version (version_num varchar(32) primary key)")
    con.execute("insert into alembic_version values ('9999')")
    con.commit()
    con.close()
    r = run("daemon", "--once", "--policy", "sjf", "--db", str(db), tmp_path=tmp_path)
    assert r.exit_code == 4, r.output
    assert "9999" in r.output
    r = run("revert", "--db", str(db), tmp_path=tmp_path)
    assert r.exit_code == 4, r.output


def test_unknown_default_app_is_exit_2_naming_the_setting(replay, tmp_path):
    conf = tmp_path / "g.toml"
    conf.write_text('[defaults]\napp = "nosuchapp"\n')
    db = tmp_path / "g.db"
    r = run("daemon", "--once", "--policy", "sjf", "--config", str(conf), "--db", str(db),
            tmp_path=tmp_path)
    assert r.exit_code == 2, r.output
    assert "defaults.app 'nosuchapp'" in r.output
    assert replay.mutations() == []


def test_default_batch_below_1_is_a_config_error(tmp_path):
    from gimbalctl.config import ConfigError, load
    conf = tmp_path / "g.toml"
    conf.write_text("[defaults]\nbatch = 0\n")
    with pytest.raises(ConfigError, match="defaults.batch"):
        load(str(conf))
