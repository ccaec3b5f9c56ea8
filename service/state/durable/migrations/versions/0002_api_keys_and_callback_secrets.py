"""API keys (append-only, with revocations and last-used times beside them) and per-tenant callback secrets.

Revision 0002 (after 0001), made 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.state.durable import append_only

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_key_last_used",
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("last_used_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("key_id"),
        info={"append_only": False},
    )
    op.create_table(
        "api_key_revocations",
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("revoked_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("key_id"),
        info={"append_only": True},
    )
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("secret_sha256", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("key_id"),
        info={"append_only": True},
    )
    op.create_index("api_keys_tenant", "api_keys", ["tenant"], unique=False)

    op.create_table(
        "callback_secrets",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        info={"append_only": True},
        sqlite_autoincrement=True,
    )
    op.create_index("callback_secrets_tenant", "callback_secrets", ["tenant", "id"], unique=False)
    for table in ("api_keys", "api_key_revocations", "callback_secrets"):
        append_only.refuse_changes(table)


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
