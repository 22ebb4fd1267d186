-- `tasks/list` (MCP 2025-11-25): a principal's tasks, oldest first.
CREATE INDEX tasks_by_principal ON tasks (principal, created_at_ms, id);

-- Protocol sessions of 2025-11-25 clients (`Store::put_session`): the
-- client's `initialize`, as JSON, so a session survives a restart.
CREATE TABLE sessions (
    id            TEXT    NOT NULL PRIMARY KEY,
    state         TEXT    NOT NULL, -- JSON
    updated_at_ms INTEGER NOT NULL
) STRICT;

-- The sweep deletes sessions untouched for `SESSION_TTL`.
CREATE INDEX sessions_by_age ON sessions (updated_at_ms);
