-- The hand-written schema of service/review/db.py before the migrations (main at 02ef8ab), frozen here:
-- the first migration must adopt a file made by it without losing a row.
CREATE TABLE IF NOT EXISTS verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    item_id TEXT NOT NULL,
    assessment_id TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    label TEXT NOT NULL CHECK (label IN ('VALID', 'MINOR', 'MAJOR')),
    error_category TEXT,
    note TEXT,
    lease_id TEXT,
    created_at REAL NOT NULL,
    snapshot TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS verdicts_item ON verdicts (tenant, item_id);
CREATE TRIGGER IF NOT EXISTS verdicts_no_update BEFORE UPDATE ON verdicts
BEGIN SELECT RAISE(ABORT, 'verdicts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS verdicts_no_delete BEFORE DELETE ON verdicts
BEGIN SELECT RAISE(ABORT, 'verdicts are append-only'); END;

CREATE TABLE IF NOT EXISTS adjudications (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    item_id TEXT,
    status TEXT NOT NULL,
    label TEXT,
    created_at REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS adjudications_tenant ON adjudications (tenant, item_id);
CREATE TRIGGER IF NOT EXISTS adjudications_no_update BEFORE UPDATE ON adjudications
BEGIN SELECT RAISE(ABORT, 'adjudications are append-only'); END;
CREATE TRIGGER IF NOT EXISTS adjudications_no_delete BEFORE DELETE ON adjudications
BEGIN SELECT RAISE(ABORT, 'adjudications are append-only'); END;

CREATE TABLE IF NOT EXISTS fits (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    model_name TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS risk_models (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    rule TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (tenant, name)
);
CREATE TRIGGER IF NOT EXISTS risk_models_no_update BEFORE UPDATE ON risk_models
BEGIN SELECT RAISE(ABORT, 'risk models are append-only'); END;
CREATE TRIGGER IF NOT EXISTS risk_models_no_delete BEFORE DELETE ON risk_models
BEGIN SELECT RAISE(ABORT, 'risk models are append-only'); END;

CREATE TABLE IF NOT EXISTS model_activations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    model_name TEXT NOT NULL,
    rule TEXT NOT NULL,
    activated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS activations_tenant ON model_activations (tenant, id);
CREATE TRIGGER IF NOT EXISTS activations_no_update BEFORE UPDATE ON model_activations
BEGIN SELECT RAISE(ABORT, 'activations are append-only'); END;
