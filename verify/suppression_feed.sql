-- Verify mailroom:suppression_feed on pg

BEGIN;

SELECT written_xid FROM mailroom.suppressions WHERE false;
SELECT 'mailroom.suppressions_written_idx'::regclass;
SELECT written_xid, address_key, address, reason, source, stream, created_at
FROM mailroom.suppressions_written(NULL, NULL, NULL, 1) WHERE false;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.suppressions_written(xid8, text, text, integer)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom.suppressions_written(xid8, text, text, integer)', 'execute'))::int;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.suppress_copies(text[], text[], text[], text[], text[])', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom.suppress_copies(text[], text[], text[], text[], text[])', 'execute'))::int;

ROLLBACK;
