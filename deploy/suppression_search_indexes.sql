-- Deploy mailroom:suppression_search_indexes to pg
-- requires: streams
-- requires: address_wire_form

-- Issue 32, item 7: suppression_search sorted the whole list (newest first)
-- for every page and scanned all of it for a substring. The list is written
-- by unsubscribes, bounces, complaints and operators, never by enqueue or a
-- claim (they read it by its key): four entries more per suppression. The
-- substring search uses a trigram index (pg_trgm, a trusted extension of
-- PostgreSQL's contrib: CREATE on the database is enough); it is created in
-- schema public unless the database has it already, wherever that is.
-- Without GIN's pending list (fastupdate = off): each suppression updates
-- the index at once (a few dozen trigram entries), and a search never
-- wades through entries no vacuum has merged yet (14 ms for 49,000 so).

BEGIN;

CREATE INDEX suppressions_created_idx ON mailroom.suppressions (created_at DESC, address_key);
CREATE INDEX suppressions_reason_idx ON mailroom.suppressions (reason, created_at DESC, address_key);
CREATE INDEX suppressions_source_idx ON mailroom.suppressions (lower(source), created_at DESC, address_key);

CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public;
DO $$
BEGIN
  EXECUTE format('CREATE INDEX suppressions_address_trgm_idx ON mailroom.suppressions USING gin (lower(address) %I.gin_trgm_ops) WITH (fastupdate = off)',
                 (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                  WHERE e.extname = 'pg_trgm'));
END
$$;

COMMIT;
