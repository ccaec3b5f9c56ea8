"""The durable store's tables, declared once (SQLAlchemy Core): the store queries them, the migrations create them and
a test keeps the two equal on every engine.

Every table says in ``info["append_only"]`` whether its rows may ever change; for an append-only table a migration
must also call ``append_only.refuse_changes`` (the database then refuses UPDATE, DELETE and TRUNCATE).
"""

from __future__ import annotations

import sqlalchemy as sa

from service.state.durable.records import LABELS

__all__ = [
    "adjudications",
    "api_key_last_used",
    "api_key_revocations",
    "api_keys",
    "assessments",
    "batches",
    "callback_secrets",
    "fits",
    "idempotency_keys",
    "judge_jobs",
    "metadata",
    "model_activations",
    "persona_versions",
    "review_items",
    "risk_models",
    "schema_compat",
    "score_pool",
    "verdicts",
]

# deterministic names for constraints the declarations leave unnamed, so a later migration can name what it drops
metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    }
)

# a key that only counts up: BIGSERIAL on PostgreSQL; on SQLite the rowid alias, which must be exactly INTEGER, and
# AUTOINCREMENT so that an id is never handed out twice
Serial = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# epoch seconds; an 8-byte float on both engines (PostgreSQL's REAL would be 4 bytes)
Time: sa.Double[float] = sa.Double()

verdicts = sa.Table(
    "verdicts",
    metadata,
    sa.Column("id", Serial, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("item_id", sa.Text, nullable=False),
    sa.Column("assessment_id", sa.Text, nullable=False),
    sa.Column("candidate_id", sa.Text, nullable=False),
    sa.Column("reviewer", sa.Text, nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("error_category", sa.Text),
    sa.Column("note", sa.Text),
    sa.Column("lease_id", sa.Text),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("snapshot", sa.Text, nullable=False),  # JSON: the item's signals and risk when the verdict was given
    # the client's Idempotency-Key: a retried verdict (lost acknowledgement) returns the one stored (0006)
    sa.Column("request_key", sa.Text),
    # JSON lists: the reviewer's word on each finding shown (FindingJudgement) and the errors she marked (ErrorSpan)
    sa.Column("findings", sa.Text),
    sa.Column("spans", sa.Text),
    # the id of the reviewer's own earlier verdict this one replaces (both are kept: the table is append-only)
    sa.Column("supersedes", sa.BigInteger),
    sa.Column("lease_seconds", Time),  # from the claim to the verdict (None: given without a lease)
    sa.Column("active_seconds", Time),  # time the item's page was in front of the reviewer (the workbench says)
    sa.CheckConstraint(sa.column("label").in_(LABELS), name="label"),
    sa.Index("verdicts_item", "tenant", "item_id"),
    sqlite_autoincrement=True,
    info={"append_only": True},
)

adjudications = sa.Table(
    "adjudications",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("item_id", sa.Text),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("label", sa.Text),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # JSON: the whole Adjudication record
    sa.Index("adjudications_tenant", "tenant", "item_id"),
    info={"append_only": True},
)

fits = sa.Table(
    "fits",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("model_name", sa.Text, nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # JSON: what the fit measured and chose
    sa.Index("fits_tenant", "tenant", "created_at"),
    info={"append_only": True},
)

risk_models = sa.Table(
    "risk_models",
    metadata,
    sa.Column("id", Serial, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("rule", sa.Text, nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # the RiskModel's JSON, served byte for byte
    # settles the race of two fits taking the same next name (DurableStore.add_model retries)
    sa.UniqueConstraint("tenant", "name", name="risk_models_tenant_name"),
    sqlite_autoincrement=True,
    info={"append_only": True},
)

model_activations = sa.Table(
    "model_activations",
    metadata,
    sa.Column("id", Serial, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("model_name", sa.Text, nullable=False),
    sa.Column("rule", sa.Text, nullable=False),
    sa.Column("activated_at", Time, nullable=False),
    # who activated it, whether over a comparison it lost (with the admin's reason), and the comparison with the model
    # it replaced and what the model is (JSON: kind fit|demotion|shipped, the check a demotion stops forcing) (0009)
    sa.Column("activated_by", sa.Text),
    sa.Column("forced", sa.Boolean),
    sa.Column("reason", sa.Text),
    sa.Column("body", sa.Text),
    # the active model is the tenant's latest activation
    sa.Index("activations_tenant", "tenant", "id"),
    sqlite_autoincrement=True,
    info={"append_only": True},
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("key_id", sa.Text, primary_key=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("scopes", sa.Text, nullable=False),  # comma-separated, canonical order
    sa.Column("secret_sha256", sa.Text, nullable=False),  # never the secret itself
    sa.Column("created_at", Time, nullable=False),
    sa.Column("expires_at", Time),
    sa.Index("api_keys_tenant", "tenant"),
    info={"append_only": True},
)

# revoking a key is a row of its own, so the key rows stay append-only
api_key_revocations = sa.Table(
    "api_key_revocations",
    metadata,
    sa.Column("key_id", sa.Text, primary_key=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("revoked_at", Time, nullable=False),
    info={"append_only": True},
)

# the one mutable table: when a key was last used (written at most once a minute per key)
api_key_last_used = sa.Table(
    "api_key_last_used",
    metadata,
    sa.Column("key_id", sa.Text, primary_key=True),
    sa.Column("last_used_at", Time, nullable=False),
    info={"append_only": False},
)

# the HMAC key callbacks are signed with, per tenant; rotating it adds a row (the latest is the one in use)
callback_secrets = sa.Table(
    "callback_secrets",
    metadata,
    sa.Column("id", Serial, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("secret", sa.Text, nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.Index("callback_secrets_tenant", "tenant", "id"),
    sqlite_autoincrement=True,
    info={"append_only": True},
)

# every version of every persona (Poller): a change adds a version, a deletion adds a tombstone; never edited
persona_versions = sa.Table(
    "persona_versions",
    metadata,
    sa.Column("id", Serial, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("persona_id", sa.Text, nullable=False),
    sa.Column("version", sa.Text, nullable=False),  # sha256 of the persona's text ("" for a tombstone)
    sa.Column("body", sa.Text, nullable=False),  # the Persona's JSON ("" for a tombstone)
    sa.Column("deleted", sa.Boolean, nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.Index("persona_versions_persona", "tenant", "persona_id", "id"),
    sqlite_autoincrement=True,
    info={"append_only": True},
)

# which releases may run on this schema: every upgrade that moves the head appends the oldest revision whose code still
# works on it (raised only by a contract migration, service/state/durable/migrate.py); a release that finds the database
# at a revision it does not know reads the latest row to decide whether it may run (rollback)
schema_compat = sa.Table(
    "schema_compat",
    metadata,
    sa.Column("id", Serial, primary_key=True, autoincrement=True),
    sa.Column("revision", sa.Text, nullable=False),  # the head this row was written at
    sa.Column("oldest_reader", sa.Text, nullable=False),  # the oldest revision whose code runs on that schema
    sa.Column("release", sa.Text, nullable=False),  # service.__version__ of the release that migrated
    sa.Column("created_at", Time, nullable=False),
    sqlite_autoincrement=True,
    info={"append_only": True},
)


# -- records of work (mutable: parts are written once each, by conditional UPDATEs; purged after retention)
Blob = sa.LargeBinary()  # a packed record (service/state/durable/packing.py): msgspec JSON, zlib where it pays

# one row per assessment: what the API accepted and every part as the workers write it (each once: UPDATE ... WHERE
# <part> IS NULL); ``todo`` is 1 while work or a callback is left, the reconciler's index
assessments = sa.Table(
    "assessments",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("batch_id", sa.Text),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("todo", sa.Integer, nullable=False),
    sa.Column("candidates", sa.Integer, nullable=False),  # how many: the queued-candidates quota sums them
    sa.Column("meta", Blob, nullable=False),
    sa.Column("cheap", Blob),
    sa.Column("provisional", Blob),
    sa.Column("llm", Blob),
    sa.Column("final", Blob),
    sa.Column("started_at", Time),
    sa.Column("llm_started_at", Time),
    sa.Column("failed", sa.Text),
    sa.Column("tail_done_at", Time),
    sa.Column("tail_error", sa.Text),
    sa.Column("pooled_at", Time),  # its unforced scores joined the tenant's pool (once)
    sa.Column("callback", Blob),
    sa.Column("callback_status", sa.Text),
    sa.Column("callback_cheap", Blob),
    sa.Column("callback_cheap_status", sa.Text),
    sa.Index("assessments_created", "created_at"),
    sa.Index("assessments_tenant_created", "tenant", "created_at"),
    sa.Index("assessments_todo", "todo", "created_at"),
    sa.Index("assessments_tenant_todo", "tenant", "todo"),
    info={"append_only": False},
)

# an Idempotency-Key and the assessment it created, claimed in the transaction that writes the assessment
idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("assessment_id", sa.Text, nullable=False),
    sa.Column("request_sha", sa.Text, nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.Index("idempotency_keys_created", "created_at"),
    info={"append_only": False},
)

batches = sa.Table(
    "batches",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("meta", Blob, nullable=False),
    sa.Index("batches_created", "created_at"),
    info={"append_only": False},
)

# the budget rank's pool: how many unforced scores per tenant, model version and score bucket (a bounded histogram,
# service/state/durable/records_store.py says how wide a bucket is)
score_pool = sa.Table(
    "score_pool",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("rule", sa.Text, primary_key=True),
    sa.Column("bucket", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("n", sa.BigInteger, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    sa.Index("score_pool_updated", "updated_at"),
    info={"append_only": False},
)

# companion judge jobs (Poller evaluations, MATA grades, multiple-choice runs): the plan, the result written once
judge_jobs = sa.Table(
    "judge_jobs",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("todo", sa.Integer, nullable=False),
    sa.Column("plan", Blob, nullable=False),
    sa.Column("result", Blob),
    sa.Column("started_at", Time),
    sa.Column("failed", sa.Text),
    sa.Index("judge_jobs_created", "created_at"),
    sa.Index("judge_jobs_todo", "todo", "created_at"),
    info={"append_only": False},
)

# the review queue: one row per candidate of a published assessment, mutable (priority refreshed by the final result,
# leases, verdict counts); removed with its assessment (``review_items.forget_items``). A lease is the set of rows
# that carry its id: no lease table, so a claim, verdict, renewal or release touches only the rows it locks
review_items = sa.Table(
    "review_items",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("assessment_id", sa.Text, nullable=False),
    sa.Column("candidate_id", sa.Text, nullable=False),
    sa.Column("enqueued_at", Time, nullable=False),
    sa.Column("expires_at", Time),  # the assessment's end under TRISK_RETENTION_SECONDS (None: kept for good)
    sa.Column("priority", sa.Double(), nullable=False),  # risk.priority: the queue's order
    sa.Column("flagged", sa.Boolean, nullable=False),
    sa.Column("forced", sa.Boolean, nullable=False),
    sa.Column("tier", sa.Text),
    sa.Column("lang", sa.Text, nullable=False),
    sa.Column("model", sa.Text),
    sa.Column("batch_id", sa.Text),
    sa.Column("body", sa.Text, nullable=False),  # the QueueItem's JSON (snapshot a verdict copies)
    sa.Column("verdicts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lease_id", sa.Text),
    sa.Column("lease_reviewer", sa.Text),
    sa.Column("lease_created", Time),
    sa.Column("lease_expires", Time),
    # listing walks a tenant's items by priority (descending: the index read backwards); claiming and the default
    # listing (pending) walk only the unreviewed ones, so reviewed items at the top never slow a claim down
    sa.Index("review_items_order", "tenant", "priority", "id"),
    sa.Index(
        "review_items_unreviewed",
        "tenant",
        "priority",
        "id",
        postgresql_where=sa.text("verdicts = 0"),
        sqlite_where=sa.text("verdicts = 0"),
    ),
    # a claim and the default listing take flagged items only: with ``flagged`` in the key they read just those, in
    # priority order, instead of filtering it on each row the unreviewed index gives (0007)
    sa.Index(
        "review_items_claim",
        "tenant",
        "flagged",
        "priority",
        "id",
        postgresql_where=sa.text("verdicts = 0"),
        sqlite_where=sa.text("verdicts = 0"),
    ),
    sa.Index("review_items_assessment", "tenant", "assessment_id"),
    sa.Index("review_items_lease", "tenant", "lease_id"),
    sa.Index("review_items_batch", "tenant", "batch_id", "priority"),
    sa.Index("review_items_expiry", "expires_at"),
    info={"append_only": False},
)
