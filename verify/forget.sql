-- Verify mailroom:forget on pg

BEGIN;

SELECT has_function_privilege('mailroom.forget(text)', 'execute'),
       has_function_privilege('mailroom.is_forgotten(text)', 'execute'),
       has_function_privilege('mailroom._forgotten_hash(text)', 'execute'),
       has_function_privilege('mailroom._mentions(text, text)', 'execute');
SELECT key_hash, forgotten_at FROM mailroom.forgotten_addresses WHERE false;
SELECT 1 / count(*) FROM mailroom.erasure_pepper;
SELECT 1 / count(*) FROM mailroom.forgotten_filter WHERE octet_length(bits) = 8192;
SELECT has_function_privilege('mailroom._forgotten_bit(text)', 'execute');
DO $$
BEGIN
  ASSERT (SELECT prosrc LIKE '%mailroom.forgotten_filter%' FROM pg_proc WHERE oid = 'mailroom.forget(text)'::regprocedure),
    'forget does not set the address''s bit in forgotten_filter: the gate would let its mail go';
END
$$;

ROLLBACK;
