"""jobs.meta, jobs.est_outran: gimbal metadata kept once read; estimate accuracy

``meta``: the gimbal metadata (``GimbalMeta.as_dict``) last read from the job's
AdminComment, so a later AdminComment written by another tool (a jobstats ``JS1:``
summary) does not lose it.  ``est_outran``: 1 once the job ran longer than the duration
estimate gimbal used for it (estimate-accuracy tracking, docs/daemon.md).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("meta", sa.JSON))
        b.add_column(sa.Column("est_outran", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("est_outran")
        b.drop_column("meta")
