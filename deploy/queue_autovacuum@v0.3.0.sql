-- Deploy mailroom:queue_autovacuum to pg
-- requires: table_messages
-- requires: table_attempts

-- PostgreSQL's autovacuum defaults wait for 50 + 20 % of a table's rows to be
-- dead: with 5 million mails of history that is a million dead versions in
-- the claim index before the first vacuum. bench/bloat.py drained 1,000,000
-- mails: with the defaults no vacuum ran and 2,000,000 dead versions were
-- left; with these settings and a 10 s naptime, 561 to 764,514 (four runs);
-- claims at the end were 2.9 to 5.6 x slower than at the start with the
-- defaults, 0.9 to 3.0 x with these (that figure depends on whether a vacuum
-- had just finished). Until v0.3.0 docs/operations.md asked the DBA to set
-- them; now the deploy does.
--
-- A fixed threshold (scale factor 0) vacuums after every 10,000 dead versions
-- however large the history, so each vacuum is short; the insert threshold
-- does the same for the ledger, which is only ever inserted into, and sets
-- its visibility map early; analyze after 2 % keeps the planner's view of the
-- small queued share current; the higher cost limit lets one vacuum finish
-- before the next 10,000 pile up. The server-wide autovacuum_naptime cannot be
-- set per table: docs/operations.md recommends 10 s.

BEGIN;

ALTER TABLE mailroom.messages SET (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000);
ALTER TABLE mailroom.attempts SET (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000);

COMMIT;
