-- Verify mailroom:release on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.release(bigint[], uuid, timestamptz)', 'execute');
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%INSERT INTO mailroom.attempts%' FROM pg_proc WHERE oid = 'mailroom.release(bigint[], uuid, timestamptz)'::regprocedure),
    'release does not write the released attempt to the ledger';
END
$$;

ROLLBACK;
