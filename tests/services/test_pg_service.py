"""The test PostgreSQL service answers SQL."""
import shutil
import subprocess

from tests.services.pg import ensure_postgres


def test_postgres_answers():
    url = ensure_postgres()
    assert url.startswith("postgresql://gimbal@127.0.0.1:")
    psql = shutil.which("psql") or "/usr/bin/psql"
    out = subprocess.run([psql, url, "-tAc", "select current_user, current_database()"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "gimbal|gimbal_test"
