-- Verify mailroom:inspect on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.inspect(text)', 'execute')::integer;
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%m.status = ''sending''%' FROM pg_proc WHERE oid = 'mailroom.inspect(text)'::regprocedure),
    'inspect does not show the attempt in flight';
END
$$;

ROLLBACK;
