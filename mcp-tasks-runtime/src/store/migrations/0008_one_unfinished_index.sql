-- `tasks_unfinished` (status) indexed the same rows as
-- `tasks_unfinished_by_principal`, under the same condition: startup
-- recovery's query now scans that one, and every write that creates a task
-- or moves one in or out of the unfinished statuses updates one index fewer.
DROP INDEX tasks_unfinished;
