"""The first schema: verdicts, adjudications, fits, fitted risk models and their activations, all append-only.

It adopts a database made by the hand-written SQLite schema that came before the migrations: a table that exists
already (with the columns it had then) is kept with its rows, only what is missing (indexes, triggers) is added.
The tables are written out here as they were at this revision, not imported from ``schema.py``, which moves on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.state.durable import append_only

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_meta = sa.MetaData()
_serial = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

_TABLES = [
    sa.Table(
        "verdicts",
        _meta,
        sa.Column("id", _serial, primary_key=True, autoincrement=True),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("item_id", sa.Text, nullable=False),
        sa.Column("assessment_id", sa.Text, nullable=False),
        sa.Column("candidate_id", sa.Text, nullable=False),
        sa.Column("reviewer", sa.Text, nullable=False),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("error_category", sa.Text),
        sa.Column("note", sa.Text),
        sa.Column("lease_id", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("snapshot", sa.Text, nullable=False),
        sa.CheckConstraint("label IN ('VALID', 'MINOR', 'MAJOR')", name="ck_verdicts_label"),
        sa.Index("verdicts_item", "tenant", "item_id"),
        sqlite_autoincrement=True,
    ),
    sa.Table(
        "adjudications",
        _meta,
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("item_id", sa.Text),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("label", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Index("adjudications_tenant", "tenant", "item_id"),
    ),
    sa.Table(
        "fits",
        _meta,
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("model_name", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Index("fits_tenant", "tenant", "created_at"),
    ),
    sa.Table(
        "risk_models",
        _meta,
        sa.Column("id", _serial, primary_key=True, autoincrement=True),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.UniqueConstraint("tenant", "name", name="risk_models_tenant_name"),
        sqlite_autoincrement=True,
    ),
    sa.Table(
        "model_activations",
        _meta,
        sa.Column("id", _serial, primary_key=True, autoincrement=True),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("model_name", sa.Text, nullable=False),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("activated_at", sa.Double, nullable=False),
        sa.Index("activations_tenant", "tenant", "id"),
        sqlite_autoincrement=True,
    ),
]


def upgrade() -> None:
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    for table in _TABLES:
        if table.name not in existing:
            table.create(bind)
        elif bind.dialect.name == "sqlite":
            _adopt(bind, table)
        else:
            raise RuntimeError(f"table {table.name!r} exists in a database trisk never migrated: not trisk's")
    for table in _TABLES:
        append_only.refuse_changes(table.name)


def _adopt(bind: sa.Connection, table: sa.Table) -> None:
    """Rebuild a table of the hand-written SQLite schema as declared here, every row with its id: the same columns,
    but REAL where this schema says DOUBLE, nullable primary keys and an unnamed UNIQUE constraint, which would make
    adopted files differ from new ones in every later migration. DDL is transactional: a failure keeps the old table."""
    found = [c["name"] for c in sa.inspect(bind).get_columns(table.name)]
    wanted = [c.name for c in table.columns]
    if sorted(found) != sorted(wanted):
        raise RuntimeError(f"table {table.name!r} exists but is not trisk's: columns {found}, expected {wanted}")
    # its triggers and indexes go first: a renamed table keeps them, and the new table's indexes take the old names
    for kind in ("trigger", "index"):
        names = bind.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = ? AND tbl_name = ? AND sql IS NOT NULL", (kind, table.name)
        ).scalars()
        for name in list(names):
            op.execute(f'DROP {kind.upper()} "{name}"')
    old = f"legacy_{table.name}"
    op.execute(f'ALTER TABLE "{table.name}" RENAME TO "{old}"')
    table.create(bind)
    columns = ", ".join(f'"{c}"' for c in wanted)
    op.execute(f'INSERT INTO "{table.name}" ({columns}) SELECT {columns} FROM "{old}"')
    # DROP TABLE deletes the rows without firing DELETE triggers (and the old ones are gone already)
    op.execute(f'DROP TABLE "{old}"')


def downgrade() -> None:
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
