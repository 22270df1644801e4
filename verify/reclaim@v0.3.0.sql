-- Verify mailroom:reclaim on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.reclaim(timestamptz, integer)', 'execute');
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%INSERT INTO mailroom.attempts%' FROM pg_proc WHERE oid = 'mailroom.reclaim(timestamptz, integer)'::regprocedure),
    'reclaim does not write the expired attempt to the ledger';
END
$$;

ROLLBACK;
