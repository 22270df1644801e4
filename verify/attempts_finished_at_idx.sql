-- Verify mailroom:attempts_finished_at_idx on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
          WHERE i.indexrelid = to_regclass('mailroom.attempts_finished_at_idx'))
         = 'CREATE INDEX attempts_finished_at_idx ON mailroom.attempts USING btree (finished_at) WHERE (finished_as IS NOT NULL)',
    'attempts_finished_at_idx is missing or not the finishing rows by finish time';
END
$$;

ROLLBACK;
