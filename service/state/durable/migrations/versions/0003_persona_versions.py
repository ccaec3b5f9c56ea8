"""Persona versions (Poller): every change and every deletion of a persona is a row of its own, append-only.

Revision 0003 (after 0002), made 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.state.durable import append_only

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "persona_versions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("persona_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        info={"append_only": True},
        sqlite_autoincrement=True,
    )
    op.create_index("persona_versions_persona", "persona_versions", ["tenant", "persona_id", "id"], unique=False)
    append_only.refuse_changes("persona_versions")


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
