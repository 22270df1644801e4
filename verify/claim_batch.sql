-- Verify mailroom:claim_batch on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.claim_batch(text, integer, interval, text)', 'execute');
DO $$
BEGIN
  ASSERT NOT has_function_privilege('mailroom_runner',
           'mailroom._claim_batch(text, integer, interval, text, timestamptz)', 'execute'),
    'the clock-pinning _claim_batch must be owner-only';
  ASSERT (SELECT prosrc LIKE '%greatest(p_now, q.updated_at)%' FROM pg_proc
          WHERE oid = 'mailroom._claim_batch(text, integer, interval, text, timestamptz)'::regprocedure),
    'claim_batch stamps claims with the transaction start, not after the row''s last change';
  ASSERT (SELECT prosrc LIKE '%mailroom._claim_gate(%' FROM pg_proc
          WHERE oid = 'mailroom._claim_batch(text, integer, interval, text, timestamptz)'::regprocedure),
    'claim_batch does not apply the gate';
  ASSERT (SELECT prosrc LIKE '%mailroom._claim_gate(%' FROM pg_proc
          WHERE oid = 'mailroom._claim_refused(bigint[], uuid, text[], timestamptz)'::regprocedure),
    'what the gate refuses is not moved by the gate''s verdict';
  ASSERT (SELECT prosrc LIKE '%FOR SHARE SKIP LOCKED%' AND prosrc NOT LIKE '%FOR SHARE)%' FROM pg_proc
          WHERE oid = 'mailroom._claim_refused(bigint[], uuid, text[], timestamptz)'::regprocedure),
    'the gate waits for a paused campaign''s or sender''s row that another transaction holds';
  ASSERT (SELECT prosrc LIKE '%mailroom.forgotten_addresses%' FROM pg_proc
          WHERE oid = 'mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz)'::regprocedure),
    'the gate lets mail to a forgotten address go';
  ASSERT (SELECT prosrc LIKE '%mailroom.forgotten_filter%' FROM pg_proc
          WHERE oid = 'mailroom._claim_gate(text, text, bigint, bigint, text, timestamptz)'::regprocedure),
    'the gate works out every pick''s HMAC instead of testing its bit in forgotten_filter first';
  ASSERT mailroom._claim_recheck_delay() > interval '0',
    'no delay for mail whose pause could not be confirmed';
  ASSERT to_regprocedure('mailroom.claim_batch(text, integer, interval, text, timestamptz)') IS NULL,
    'the v0.3 claim_batch with p_now is still executable';
END
$$;

ROLLBACK;
