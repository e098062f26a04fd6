"""gimbal state store (SQLAlchemy 2 + alembic migrations shipped in ``migrations/``)."""
from .db import Store, StoreError, resolve_url

__all__ = ["Store", "StoreError", "resolve_url"]
