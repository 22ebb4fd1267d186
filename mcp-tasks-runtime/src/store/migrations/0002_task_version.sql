-- A change counter per task (`TaskRecord::version`): 0 at creation, one more
-- on every change. Tasks written before it start at 0.
ALTER TABLE tasks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
