"""The append-only guarantee, kept by the database itself: migrations call ``refuse_changes(table)`` and from then on
an UPDATE, DELETE (or, on PostgreSQL, TRUNCATE) of that table fails, whatever client sends it.

SQLite: BEFORE UPDATE/DELETE triggers that RAISE(ABORT). PostgreSQL: one trigger function, a row trigger on UPDATE and
DELETE and a statement trigger on TRUNCATE (which row triggers do not see). Keep in mind that SQLite drops a table's
triggers with the table: a batch migration (copy, drop, rename) of an append-only table must call this again.
"""

from __future__ import annotations

from alembic import op

__all__ = ["PG_FUNCTION", "refuse_changes"]

PG_FUNCTION = "trisk_refuse_change"


def refuse_changes(table: str) -> None:
    """In a migration: make ``table`` append-only (idempotent)."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER IF NOT EXISTS {table}_no_{action.lower()} BEFORE {action} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} rows are append-only'); END"
            )
        return
    op.execute(
        f"CREATE OR REPLACE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"RAISE EXCEPTION '% rows are append-only (% refused)', TG_TABLE_NAME, TG_OP "
        f"USING ERRCODE = 'restrict_violation'; END $$"
    )
    op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
    op.execute(
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {PG_FUNCTION}()"
    )
    op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    op.execute(
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_FUNCTION}()"
    )
