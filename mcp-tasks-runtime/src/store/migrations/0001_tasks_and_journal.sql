-- Tasks and their journals.
--
-- Applied once, inside a transaction, when `PRAGMA user_version` is 0; the
-- store then sets user_version to 1. Never edit a migration that has shipped:
-- add the next numbered file instead.

-- One row per task. JSON columns hold TEXT produced by serde_json. Counts of
-- milliseconds that do not fit in an i64 are stored as i64::MAX.
CREATE TABLE tasks (
    id                  TEXT    NOT NULL PRIMARY KEY,
    tool                TEXT    NOT NULL,
    arguments           TEXT    NOT NULL, -- JSON object
    client_capabilities TEXT    NOT NULL, -- JSON value
    principal           TEXT,
    status              TEXT    NOT NULL, -- TaskStatus::as_str
    status_message      TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    ttl_ms              INTEGER,
    expires_at_ms       INTEGER,          -- created_at_ms + ttl_ms (saturating); NULL: never
    poll_interval_ms    INTEGER,
    pending             TEXT    NOT NULL, -- JSON array of PendingInput
    wake_at_ms          INTEGER,
    cancel_requested    INTEGER NOT NULL, -- 0 or 1
    result              TEXT,             -- JSON object
    error               TEXT              -- JSON object
) STRICT;

-- The expiry sweep and `next_expiry` read this index in deadline order.
CREATE INDEX tasks_by_expiry ON tasks (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

-- Startup recovery reads only the unfinished tasks.
CREATE INDEX tasks_unfinished ON tasks (status) WHERE status IN ('working', 'input_required');

-- One row per recorded step. Deleting a task deletes its journal.
CREATE TABLE journal (
    task_id  TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    kind     TEXT    NOT NULL, -- StepKind::as_str
    name     TEXT    NOT NULL,
    value    TEXT    NOT NULL, -- JSON value
    PRIMARY KEY (task_id, position)
) STRICT;
