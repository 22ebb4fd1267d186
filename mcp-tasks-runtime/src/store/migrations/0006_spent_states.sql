-- Single-use tokens (MRTR `requestState`): each is recorded when spent, and
-- kept until it expires, so that a replay is refused by every instance
-- sharing the store (`Store::spend`).
CREATE TABLE spent_states (
    id            TEXT    PRIMARY KEY,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX spent_states_expiry ON spent_states (expires_at_ms);
-- The per-principal cap on unfinished tasks counts them by principal.
CREATE INDEX tasks_unfinished_by_principal ON tasks (principal)
    WHERE status IN ('working', 'input_required');
