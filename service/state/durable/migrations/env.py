"""Alembic's entry point for the durable store: runs on the connection ``migrate`` passes in, inside its transaction
(which holds the migration lock), never on a URL of its own."""

from __future__ import annotations

from alembic import context

from service.state.durable.migrate import VERSION_TABLE
from service.state.durable.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `trisk db upgrade` (service.state.durable.migrate), not the alembic CLI")
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    # SQLite alters a table by copying it: Alembic's batch mode does that for the migrations that need it
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
