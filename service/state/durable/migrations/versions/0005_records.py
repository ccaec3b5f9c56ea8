"""Records of work out of Redis: assessments (each part written once), Idempotency-Keys, batches, the budget rank's
score pool and companion judge jobs; all mutable (parts fill in, the purge deletes after retention).

Revision 0005 (after 0004), made 2026-12-02.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    blob = sa.LargeBinary()
    op.create_table(
        "assessments",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("batch_id", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("todo", sa.Integer(), nullable=False),
        sa.Column("candidates", sa.Integer(), nullable=False),
        sa.Column("meta", blob, nullable=False),
        sa.Column("cheap", blob, nullable=True),
        sa.Column("provisional", blob, nullable=True),
        sa.Column("llm", blob, nullable=True),
        sa.Column("final", blob, nullable=True),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("llm_started_at", sa.Double(), nullable=True),
        sa.Column("failed", sa.Text(), nullable=True),
        sa.Column("tail_done_at", sa.Double(), nullable=True),
        sa.Column("tail_error", sa.Text(), nullable=True),
        sa.Column("pooled_at", sa.Double(), nullable=True),
        sa.Column("callback", blob, nullable=True),
        sa.Column("callback_status", sa.Text(), nullable=True),
        sa.Column("callback_cheap", blob, nullable=True),
        sa.Column("callback_cheap_status", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "id"),
    )
    op.create_index("assessments_created", "assessments", ["created_at"])
    op.create_index("assessments_tenant_created", "assessments", ["tenant", "created_at"])
    op.create_index("assessments_todo", "assessments", ["todo", "created_at"])
    op.create_index("assessments_tenant_todo", "assessments", ["tenant", "todo"])
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("assessment_id", sa.Text(), nullable=False),
        sa.Column("request_sha", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "key"),
    )
    op.create_index("idempotency_keys_created", "idempotency_keys", ["created_at"])
    op.create_table(
        "batches",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("meta", blob, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "id"),
    )
    op.create_index("batches_created", "batches", ["created_at"])
    op.create_table(
        "score_pool",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "rule", "bucket"),
    )
    op.create_index("score_pool_updated", "score_pool", ["updated_at"])
    op.create_table(
        "judge_jobs",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("todo", sa.Integer(), nullable=False),
        sa.Column("plan", blob, nullable=False),
        sa.Column("result", blob, nullable=True),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("failed", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "kind", "id"),
    )
    op.create_index("judge_jobs_created", "judge_jobs", ["created_at"])
    op.create_index("judge_jobs_todo", "judge_jobs", ["todo", "created_at"])


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
