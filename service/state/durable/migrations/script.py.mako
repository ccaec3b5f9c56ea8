"""${message}

Revision ${up_revision} (after ${down_revision | comma,n}), made ${create_date}. A new append-only table also needs
``append_only.refuse_changes("<table>")`` here; a batch operation on one (SQLite copies the table) needs it again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.state.durable import append_only  # noqa: F401 (for append-only tables)
${imports if imports else ""}
revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    # releases roll back by running the previous release on this schema (migrations only add), never by downgrading
    raise NotImplementedError("the durable store is never downgraded: restore a backup instead")
