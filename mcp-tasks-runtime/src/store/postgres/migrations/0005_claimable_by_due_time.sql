-- `Store::claimable` reads the working tasks that are due: no wake time in
-- the future and no live lease. `tasks_working` (created_at_ms, id) made it
-- walk every working task, sleeping ones too, at every scan (once a second
-- by default): at a million tasks parked on timers, 0.1 s a scan on two
-- parallel workers. This index orders them by the time they become due (the
-- later of the two, a missing one counting as 0), so a scan reads only the
-- tasks that are due; the query's expression must match this one exactly.
DROP INDEX tasks_working;
CREATE INDEX tasks_due ON tasks (
    (GREATEST(COALESCE(wake_at_ms, 0), COALESCE(lease_expires_at_ms, 0))),
    created_at_ms,
    id
) WHERE status = 'working';
-- The planner does not use a partial index's statistics: without these
-- (PostgreSQL 14 or later), it would guess a third of the tasks due and
-- prefer reading the whole table.
CREATE STATISTICS tasks_due_time ON (
    GREATEST(COALESCE(wake_at_ms, 0), COALESCE(lease_expires_at_ms, 0))
) FROM tasks;
