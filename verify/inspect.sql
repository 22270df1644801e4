-- Verify mailroom:inspect on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.inspect(text)', 'execute')::integer;
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%m.status = ''sending''%' AND prosrc LIKE '%''finished''%'
          FROM pg_proc WHERE oid = 'mailroom.inspect(text)'::regprocedure),
    'inspect does not show the attempt in flight and the finishing row';
  ASSERT (SELECT prosrc LIKE '%FROM mailroom.contents c WHERE c.delivery_key = p_ref%'
          FROM pg_proc WHERE oid = 'mailroom.inspect(text)'::regprocedure),
    'inspect does not look the key up in contents';
END
$$;

ROLLBACK;
