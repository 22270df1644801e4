-- Revert mailroom:harden_privileges from pg: back to the state before this
-- rework, which is the same. The v0.4 sweeps were created without the runner's
-- grant and cron_spec had lost PUBLIC's USAGE in v0.2.0 (the v0.3.0 instance of
-- this change, still deployed, gives both back when it is reverted). Nothing to
-- undo here: granting the runner the new sweeps would widen the privileges
-- this state had.

BEGIN;

SELECT 1;

COMMIT;
