-- The version of the tool that created each task (`TaskRecord::tool_version`):
-- the code its journal was recorded by. Tasks stored before it read back as
-- version 1.
ALTER TABLE tasks ADD COLUMN tool_version INTEGER NOT NULL DEFAULT 1;
