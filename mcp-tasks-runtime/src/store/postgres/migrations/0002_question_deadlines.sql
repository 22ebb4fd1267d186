-- Questions with deadlines (`Question::timeout`): a parked task keeps its
-- earliest deadline in `wake_at_ms`, and the deadlines themselves in
-- `pending`. `Store::overdue` reads the parked tasks whose deadline has
-- passed, the earliest first.
CREATE INDEX tasks_deadlines ON tasks (wake_at_ms, id)
    WHERE status = 'input_required' AND wake_at_ms IS NOT NULL;
