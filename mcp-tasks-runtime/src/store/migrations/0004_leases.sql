-- Ownership (`Store::claim`): the instance running a task, until when, and
-- the fencing token that refuses the writes of an earlier claim.
ALTER TABLE tasks ADD COLUMN lease_owner TEXT;
ALTER TABLE tasks ADD COLUMN lease_expires_at_ms INTEGER;
ALTER TABLE tasks ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;

-- `Store::renew` and `Store::release` read an instance's leases.
CREATE INDEX tasks_by_owner ON tasks (lease_owner) WHERE lease_owner IS NOT NULL;

-- `Store::claimable`: working tasks, the longest waiting first.
CREATE INDEX tasks_working ON tasks (created_at_ms, id) WHERE status = 'working';
