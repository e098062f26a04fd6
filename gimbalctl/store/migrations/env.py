"""Alembic environment for the gimbal state store (run programmatically by
:func:`gimbalctl.store.db.upgrade`; the connection is passed in
``config.attributes["connection"]``)."""
from alembic import context

from gimbalctl.store.models import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine
        engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
        with engine.begin() as conn:
            _run(conn)
        return
    _run(connection)


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=context.config.get_main_option("sqlalchemy.url"),
                      target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
