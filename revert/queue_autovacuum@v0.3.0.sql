-- Revert mailroom:queue_autovacuum from pg: back to PostgreSQL's autovacuum defaults.

BEGIN;

ALTER TABLE mailroom.messages RESET (
  autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
  autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
  autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_limit);
ALTER TABLE mailroom.attempts RESET (
  autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
  autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
  autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_limit);

COMMIT;
