"""Activations record who activated a model, whether the admin forced it over a comparison it lost (and why), and
that comparison with the model it replaced and what kind of model it is (a fit, a demotion of a check, shipped).

Revision 0009 (after 0008), made 2026-12-05. Expand only: nullable columns, which older releases leave empty when
they activate a model (read back as not forced, no reason, no comparison). SQLite keeps the table's append-only
triggers across ADD COLUMN; PostgreSQL's are on the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("model_activations", sa.Column("activated_by", sa.Text(), nullable=True))
    op.add_column("model_activations", sa.Column("forced", sa.Boolean(), nullable=True))
    op.add_column("model_activations", sa.Column("reason", sa.Text(), nullable=True))
    op.add_column("model_activations", sa.Column("body", sa.Text(), nullable=True))


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
