"""The review queue's flagged, unreviewed items in an index of their own: a claim or a listing of flagged items (the
workbench's default) reads them in priority order from the index instead of filtering ``flagged`` on every row.

Revision 0007 (after 0006), made 2026-12-02. Expand only (a new index). Built in the upgrade's transaction (no
CONCURRENTLY: Alembic runs each script in one), so writes to ``review_items`` wait while it builds: seconds for a
million items on PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "review_items_claim",
        "review_items",
        ["tenant", "flagged", "priority", "id"],
        unique=False,
        postgresql_where=sa.text("verdicts = 0"),
        sqlite_where=sa.text("verdicts = 0"),
    )


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
