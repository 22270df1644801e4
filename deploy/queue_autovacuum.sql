-- Deploy mailroom:queue_autovacuum to pg
-- requires: queue_autovacuum@v0.3.0
-- requires: split_messages

-- v0.4: this change tunes the ledger only. The v0.3 settings on the messages
-- table left with the table (split_messages; mailroom.messages is a view
-- now), and the tables that replaced it carry their own from the change
-- that creates them: mailroom.queue (table_queue: vacuum after 5,000 dead
-- rows, fillfactor 50, every row is updated about twice and deleted once)
-- and mailroom.contents (table_contents: insert-only, vacuumed for its
-- visibility map).
--
-- The ledger (mailroom.attempts) is inserted into on the way of every mail
-- (one row per attempt, one finishing row per mail) and deleted from only by
-- prune, in batches of prune_batch_size: a fixed threshold (scale factor 0)
-- vacuums after every 10,000 dead or inserted rows however large the history
-- grows, so each vacuum is short and the visibility map of old pages is set
-- early (index-only scans of its partial indexes); analyze after 2 % keeps
-- the planner's view current; the higher cost limit lets one vacuum finish
-- before the next 10,000 pile up. Values as v0.3 set them (measured then by
-- bench/bloat.py: see docs/operations.md); set again here so that this file
-- is where a reader finds them. The server-wide autovacuum_naptime cannot be
-- set per table: docs/operations.md recommends 10 s.

BEGIN;

ALTER TABLE mailroom.attempts SET (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000);

COMMIT;
