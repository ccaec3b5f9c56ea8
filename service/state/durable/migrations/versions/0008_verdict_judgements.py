"""Verdicts keep the reviewer's word on each finding shown (``findings``), the error spans she marked (``spans``),
the verdict of her own it replaces (``supersedes``) and the time she took (``lease_seconds``: from the claim to the
verdict; ``active_seconds``: with the item's page in front of her).

Revision 0008 (after 0007), made 2026-12-05. Expand only: nullable columns, which older releases leave empty when
they insert a verdict (read back as no judgements, no spans, no timing). SQLite keeps the table's append-only
triggers across ADD COLUMN; PostgreSQL's are on the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("verdicts", sa.Column("findings", sa.Text(), nullable=True))
    op.add_column("verdicts", sa.Column("spans", sa.Text(), nullable=True))
    op.add_column("verdicts", sa.Column("supersedes", sa.BigInteger(), nullable=True))
    op.add_column("verdicts", sa.Column("lease_seconds", sa.Double(), nullable=True))
    op.add_column("verdicts", sa.Column("active_seconds", sa.Double(), nullable=True))


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
