"""audit.reason; cycles.host / cycles.pid: why each change was made, which process ran a cycle

``audit.reason`` keeps the daemon's reason for a change (e.g. ``position 3 of 10``, ``plan:
start``) next to before/after, for ``gimbalctl audit``.  ``cycles.host`` and ``cycles.pid``
name the process that ran (or skipped) a cycle: with failed and skipped cycles now recorded
too, ``gimbalctl cycles`` shows which daemon did what.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE (no batch copy): on SQLite a table copy would drop ``cycles`` and, with
    # foreign keys on, cascade-delete every audit row and decision
    op.add_column("audit", sa.Column("reason", sa.Text))
    op.add_column("cycles", sa.Column("host", sa.String(255)))
    op.add_column("cycles", sa.Column("pid", sa.Integer))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN (SQLite >= 3.35, PostgreSQL)
    op.drop_column("cycles", "pid")
    op.drop_column("cycles", "host")
    op.drop_column("audit", "reason")
