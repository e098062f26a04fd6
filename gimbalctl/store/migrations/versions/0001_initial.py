"""initial schema: jobs, cycles, decisions, job_decisions, audit, reports, profiles

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(256), nullable=False, server_default=""),
        sa.Column("user", sa.String(128), nullable=False, server_default=""),
        sa.Column("app", sa.String(64)),
        sa.Column("batch", sa.Integer),
        sa.Column("iters", sa.Float),
        sa.Column("est_s", sa.Float),
        sa.Column("gate", sa.Integer, nullable=False, server_default="0"),
        sa.Column("num_gpus", sa.Integer, nullable=False, server_default="0"),
        sa.Column("submit_time", sa.Float),
        sa.Column("state", sa.String(32), nullable=False, server_default=""),
        sa.Column("first_seen", sa.DateTime, nullable=False),
        sa.Column("last_seen", sa.DateTime, nullable=False),
        sa.Column("preemptions", sa.Integer, nullable=False, server_default="0"),
        sa.Column("meta_warnings", sa.Text),
    )
    op.create_table(
        "cycles",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("knob", sa.String(16), nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("slurm_release", sa.String(16), nullable=False, server_default=""),
        sa.Column("dry_run", sa.Integer, nullable=False, server_default="0"),
        sa.Column("status", sa.String(16), nullable=False, server_default="planned"),
        sa.Column("error", sa.Text),
        sa.Column("n_pending", sa.Integer, nullable=False, server_default="0"),
        sa.Column("n_running", sa.Integer, nullable=False, server_default="0"),
        sa.Column("n_changes", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cycle_id", sa.Integer, sa.ForeignKey("cycles.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("plan", sa.JSON, nullable=False),
        sa.Column("inputs", sa.JSON, nullable=False),
    )
    op.create_table(
        "job_decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cycle_id", sa.Integer, sa.ForeignKey("cycles.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("job_id", sa.String(64), nullable=False, index=True),
        sa.Column("position", sa.Integer),
        sa.Column("reason_code", sa.String(32), nullable=False),
        sa.Column("reason_text", sa.Text, nullable=False),
        sa.Column("numbers", sa.JSON, nullable=False),
        sa.Column("action", sa.JSON),
        sa.Column("target", sa.JSON),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cycle_id", sa.Integer, sa.ForeignKey("cycles.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("job_id", sa.String(64), nullable=False, index=True),
        sa.Column("field", sa.String(32), nullable=False),
        sa.Column("before", sa.Text),
        sa.Column("after", sa.Text),
        sa.Column("read_back", sa.Text),
        sa.Column("argv", sa.JSON),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("cycle_id", "job_id", "field", name="uq_audit_cycle_job_field"),
    )
    op.create_table(
        "reports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(64), nullable=False, index=True),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("samples_per_s", sa.Float),
        sa.Column("step_time_s", sa.Float),
        sa.Column("gpu_util", sa.Float),
        sa.Column("mem_used_mb", sa.Float),
        sa.Column("extra", sa.JSON),
        sa.UniqueConstraint("job_id", "ts", "step", name="uq_report_job_ts_step"),
    )
    op.create_table(
        "report_offsets",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("offset", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_table(
        "profiles",
        sa.Column("app", sa.String(64), primary_key=True),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("memory", sa.JSON),
        sa.Column("source", sa.String(256), nullable=False, server_default=""),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    for t in ("profiles", "report_offsets", "reports", "audit", "job_decisions",
              "decisions", "cycles", "jobs"):
        op.drop_table(t)
