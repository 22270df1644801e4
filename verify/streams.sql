-- Verify mailroom:streams on pg

BEGIN;

SELECT name, unsubscribe_headers, description FROM mailroom.streams WHERE false;
SELECT 1 / count(*) FROM mailroom.streams WHERE name IN ('transactional', 'broadcast') HAVING count(*) = 2;
SELECT stream FROM mailroom.suppressions WHERE false;
SELECT stream FROM mailroom.schedules WHERE false;
SELECT stream FROM mailroom.campaigns WHERE false;
SELECT has_function_privilege('mailroom.define_stream(text, boolean, text)', 'execute');
SELECT stream, unsubscribe_headers, description, suppressed FROM mailroom.stream_overview WHERE false;
SELECT 1/has_function_privilege('mailroom_runner', 'mailroom.stream_settings()', 'execute')::int;
SELECT has_function_privilege('mailroom._check_stream(text)', 'execute');

ROLLBACK;
