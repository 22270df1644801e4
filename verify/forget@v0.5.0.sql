-- Verify mailroom:forget on pg

BEGIN;

SELECT has_function_privilege('mailroom.forget(text)', 'execute'),
       has_function_privilege('mailroom.is_forgotten(text)', 'execute'),
       has_function_privilege('mailroom._forgotten_hash(text)', 'execute'),
       has_function_privilege('mailroom._mentions(text, text)', 'execute');
SELECT key_hash, forgotten_at FROM mailroom.forgotten_addresses WHERE false;
SELECT 1 / count(*) FROM mailroom.erasure_pepper;

ROLLBACK;
