-- Revert mailroom:queue_autovacuum from pg: back to the state split_messages
-- left. The ledger keeps the settings the v0.3.0 change gave it (the same
-- values; its own revert resets them), so they are set again as they were.

BEGIN;

ALTER TABLE mailroom.attempts SET (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000);

COMMIT;
