"""The ``store`` fixture of the state-store tests: a fresh store on SQLite and on a real
PostgreSQL server (tests/services/pg.py; a fresh schema per test)."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from gimbalctl.store import Store


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        st = Store(str(tmp_path / "g.db"))
    else:
        from tests.services.pg import ensure_postgres
        url = ensure_postgres()
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg2://" + url[len("postgresql://"):]
        base = Store(url)
        schema = f"t_{uuid.uuid4().hex[:10]}"  # a fresh schema per test
        with base.engine.begin() as c:
            c.execute(text(f"create schema {schema}"))
        st = Store(url)
        from sqlalchemy import event

        @event.listens_for(st.engine, "connect")
        def _path(dbapi_conn, _):
            cur = dbapi_conn.cursor()
            cur.execute(f"set search_path to {schema}")
            cur.close()
        request.addfinalizer(lambda: _drop(base, schema))
    st.upgrade()
    return st


def _drop(base, schema):
    with base.engine.begin() as c:
        c.execute(text(f"drop schema {schema} cascade"))
