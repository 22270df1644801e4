-- Verify mailroom:claim_batch on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner',
  'mailroom.claim_batch(text, integer, interval, text, timestamptz)', 'execute');
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%greatest(p_now, m.updated_at)%' FROM pg_proc
          WHERE oid = 'mailroom.claim_batch(text, integer, interval, text, timestamptz)'::regprocedure),
    'claim_batch stamps claims with the transaction start, not after the row''s last change';
END
$$;
DO $$
BEGIN
  ASSERT (SELECT prosrc NOT LIKE '%INSERT INTO mailroom.attempts%' FROM pg_proc WHERE oid = 'mailroom.claim_batch(text, integer, interval, text, timestamptz)'::regprocedure),
    'claim_batch still opens a ledger row per claim';
END
$$;

ROLLBACK;
