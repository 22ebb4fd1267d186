-- Tasks and their journals: the same columns as the SQLite store's.
--
-- Applied once, inside the migration transaction, with `search_path` set to
-- the store's schema; the store then records version 1 in
-- `mcp_tasks_schema_version`. Never edit a migration that has shipped: add
-- the next numbered file instead.

-- One row per task. JSON columns hold the text serde_json wrote, kept
-- byte for byte (jsonb would reorder keys and refuse "\u0000"). Times are
-- Unix milliseconds; counts that do not fit in a bigint are stored as
-- i64::MAX.
CREATE TABLE tasks (
    id                  text    NOT NULL PRIMARY KEY,
    tool                text    NOT NULL,
    arguments           text    NOT NULL, -- JSON object
    client_capabilities text    NOT NULL, -- JSON value
    principal           text,
    status              text    NOT NULL, -- TaskStatus::as_str
    status_message      text,
    created_at_ms       bigint  NOT NULL,
    updated_at_ms       bigint  NOT NULL,
    ttl_ms              bigint,
    expires_at_ms       bigint,           -- created_at_ms + ttl_ms (saturating); NULL: never
    poll_interval_ms    bigint,
    pending             text    NOT NULL, -- JSON array of PendingInput
    wake_at_ms          bigint,
    cancel_requested    boolean NOT NULL,
    result              text,             -- JSON object
    error               text,             -- JSON object
    version             bigint  NOT NULL DEFAULT 0, -- TaskRecord::version
    lease_owner         text,             -- the instance running it (Store::claim)
    lease_expires_at_ms bigint,
    fence               bigint  NOT NULL DEFAULT 0 -- one more at every claim
);

-- `Store::claimable`: working tasks, the longest waiting first.
CREATE INDEX tasks_working ON tasks (created_at_ms, id) WHERE status = 'working';

-- `Store::renew` and `Store::release` read an instance's leases.
CREATE INDEX tasks_by_owner ON tasks (lease_owner) WHERE lease_owner IS NOT NULL;

-- `tasks/list` (MCP 2025-11-25): a principal's tasks, oldest first.
CREATE INDEX tasks_by_principal ON tasks (principal, created_at_ms, id);

-- Protocol sessions of 2025-11-25 clients (`Store::put_session`).
CREATE TABLE sessions (
    id            text   NOT NULL PRIMARY KEY,
    state         text   NOT NULL, -- JSON
    updated_at_ms bigint NOT NULL
);
CREATE INDEX sessions_by_age ON sessions (updated_at_ms);

-- The expiry sweep and `next_expiry` read this index in deadline order.
CREATE INDEX tasks_by_expiry ON tasks (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

-- Startup recovery reads only the unfinished tasks, in id order (so that it
-- can page through them by id).
CREATE INDEX tasks_unfinished ON tasks (id) WHERE status IN ('working', 'input_required');

-- One row per recorded step. Deleting a task deletes its journal.
CREATE TABLE journal (
    task_id  text   NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    position bigint NOT NULL,
    kind     text   NOT NULL, -- StepKind::as_str
    name     text   NOT NULL,
    value    text   NOT NULL, -- JSON value
    PRIMARY KEY (task_id, position)
);
