"""The review queue's items (and their leases) in the store; verdicts keep the client's Idempotency-Key.

Revision 0006 (after 0005), made 2026-12-02.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "review_items",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("assessment_id", sa.Text(), nullable=False),
        sa.Column("candidate_id", sa.Text(), nullable=False),
        sa.Column("enqueued_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.Column("priority", sa.Double(), nullable=False),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("tier", sa.Text(), nullable=True),
        sa.Column("lang", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("batch_id", sa.Text(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("verdicts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("lease_id", sa.Text(), nullable=True),
        sa.Column("lease_reviewer", sa.Text(), nullable=True),
        sa.Column("lease_created", sa.Double(), nullable=True),
        sa.Column("lease_expires", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "id"),
        info={"append_only": False},
    )
    op.create_index("review_items_order", "review_items", ["tenant", "priority", "id"], unique=False)
    op.create_index(
        "review_items_unreviewed",
        "review_items",
        ["tenant", "priority", "id"],
        unique=False,
        postgresql_where=sa.text("verdicts = 0"),
        sqlite_where=sa.text("verdicts = 0"),
    )
    op.create_index("review_items_assessment", "review_items", ["tenant", "assessment_id"], unique=False)
    op.create_index("review_items_lease", "review_items", ["tenant", "lease_id"], unique=False)
    op.create_index("review_items_batch", "review_items", ["tenant", "batch_id", "priority"], unique=False)
    op.create_index("review_items_expiry", "review_items", ["expires_at"], unique=False)
    # a nullable column: older releases insert verdicts without it (expand only); SQLite keeps the table's
    # append-only triggers across ADD COLUMN
    op.add_column("verdicts", sa.Column("request_key", sa.Text(), nullable=True))


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
