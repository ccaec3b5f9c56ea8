"""Schema compatibility records: which releases may run on the schema (read by an older release on rollback).

Revision 0004 (after 0003), made 2026-12-02.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.state.durable import append_only

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schema_compat",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("revision", sa.Text(), nullable=False),
        sa.Column("oldest_reader", sa.Text(), nullable=False),
        sa.Column("release", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        info={"append_only": True},
        sqlite_autoincrement=True,
    )
    append_only.refuse_changes("schema_compat")


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
