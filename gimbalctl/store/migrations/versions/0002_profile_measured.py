"""profiles.measured: throughput measured by launcher reports; profiles.params optional

A profile row may now hold only measurements (``measured``: per GPU count, from the
launcher's throughput reports) without a fitted-parameter override (``params`` NULL).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("profiles") as b:
        b.add_column(sa.Column("measured", sa.JSON))
        b.alter_column("params", existing_type=sa.JSON, nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM profiles WHERE params IS NULL")
    with op.batch_alter_table("profiles") as b:
        b.alter_column("params", existing_type=sa.JSON, nullable=False)
        b.drop_column("measured")
