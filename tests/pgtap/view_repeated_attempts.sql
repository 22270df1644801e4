-- Tests for mailroom:view_repeated_attempts
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_view('mailroom', 'repeated_attempts', 'repeated_attempts exists');
SELECT view_owner_is('mailroom', 'repeated_attempts', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.repeated_attempts'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'repeated_attempts', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');

-- Ann (domain in two spellings) gets one mail retried twice and one sent at once;
-- Bob gets one sent at once and one retried and now in flight again; Cy's
-- first claim was released (does not count); Dan's mail was tried once, then
-- cancelled (the decision is not an attempt).
SELECT pg_temp.t_mail(k, p_to => a, p_at => '2030-01-01Z')
FROM (VALUES ('ann@example.com', 'ann-1'), ('ann@EXAMPLE.com', 'ann-2'), ('bob@example.com', 'bob-1'),
             ('bob@example.com', 'bob-2'), ('cy@example.com', 'cy-1'), ('dan@example.com', 'dan-1')) AS v(a, k);
SELECT pg_temp.t_claim(k, 'w', '2030-01-01 00:00:01Z') FROM unnest(ARRAY['ann-1', 'ann-2', 'bob-1', 'cy-1', 'dan-1']) k;
SELECT pg_temp.t_end('ann-1', 'retry', '2030-01-01 00:00:02Z', 'retry', p_smtp_code => 451);
SELECT pg_temp.t_end(k, 'sent', '2030-01-01 00:00:02Z', 'sent', p_smtp_code => 451) FROM unnest(ARRAY['ann-2', 'bob-1']) k;
SELECT pg_temp.t_end('cy-1', 'released', '2030-01-01 00:00:02Z');
SELECT pg_temp.t_end('dan-1', 'retry', '2030-01-01 00:00:02Z', 'retry', p_smtp_code => 421);
SELECT pg_temp.t_decide('dan-1', 'cancelled', 'cancelled', 'customer left', '2030-01-01 00:00:30Z');
SELECT pg_temp.t_claim(k, 'w', '2030-01-01 00:01Z') FROM unnest(ARRAY['ann-1', 'cy-1']) k;
SELECT pg_temp.t_end('ann-1', 'retry', '2030-01-01 00:01:01Z', 'retry', p_smtp_code => 451, p_smtp_enhanced => '4.7.1', p_smtp_text => 'try later');
SELECT pg_temp.t_end('cy-1', 'sent', '2030-01-01 00:01:01Z', 'sent', p_smtp_code => 451, p_smtp_enhanced => '4.7.1', p_smtp_text => 'try later');
SELECT pg_temp.t_claim('ann-1', 'w', '2030-01-01 00:02Z');
SELECT pg_temp.t_end('ann-1', 'sent', '2030-01-01 00:02:01Z', 'sent', p_smtp_code => 250);
SELECT pg_temp.t_claim('bob-2', 'w', '2030-01-01 00:03Z');
SELECT pg_temp.t_end('bob-2', 'retry', '2030-01-01 00:03:01Z', 'retry', p_smtp_code => 452);
SELECT pg_temp.t_claim('bob-2', 'w', '2030-01-01 00:04Z');

SELECT results_eq(
  $$SELECT recipient, messages, repeated_messages, attempts, most_attempts, unsuccessful, successful, duplicates,
           last_claimed_at, last_outcome, last_smtp_reply
    FROM mailroom.repeated_attempts ORDER BY recipient$$,
  $$VALUES ('ann@example.com'::text, 2::bigint, 1::bigint, 4::bigint, 3, 2::bigint, 2::bigint, 0::bigint,
            '2030-01-01 00:02Z'::timestamptz, 'sent'::text, '250'::text),
           ('bob@example.com', 2, 1, 3, 2, 1, 1, 0, '2030-01-01 00:04Z', NULL, '452')$$,
  'one row per recipient with a mail claimed more than once (domain case folded; the attempt in flight counts; released claims and decisions do not)');
SELECT results_eq($$SELECT recipient, attempts FROM mailroom.repeated_attempts WHERE recipient = 'bob@example.com'$$,
  $$VALUES ('bob@example.com'::text, 3::bigint)$$, 'one recipient, as operators ask');

-- The window: live mail and mail finished in the last 7 days. Eve's mail,
-- retried then sent 8 days ago, is history; Fay's, 6 days ago, is not.
SELECT pg_temp.t_mail(k, p_to => a, p_at => now() - interval '9 days')
FROM (VALUES ('eve@example.com', 'eve-1'), ('fay@example.com', 'fay-1')) AS v(a, k);
CREATE TEMP TABLE ra_window (k text, d interval);
INSERT INTO ra_window VALUES ('eve-1', interval '8 days'), ('fay-1', interval '6 days');
SELECT pg_temp.t_claim(k, 'w', now() - d - interval '2 minutes') FROM ra_window;
SELECT pg_temp.t_end(k, 'retry', now() - d - interval '1 minute', 'retry') FROM ra_window;
SELECT pg_temp.t_claim(k, 'w', now() - d - interval '30 seconds') FROM ra_window;
SELECT pg_temp.t_end(k, 'sent', now() - d, 'sent') FROM ra_window;
SELECT results_eq($$SELECT recipient, attempts FROM mailroom.repeated_attempts WHERE recipient IN ('eve@example.com', 'fay@example.com')$$,
  $$VALUES ('fay@example.com'::text, 2::bigint)$$, 'mail finished more than 7 days ago is left out');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.repeated_attempts), 3, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.repeated_attempts$$, '42501', 'permission denied for view repeated_attempts', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.repeated_attempts$$, '42501', 'permission denied for view repeated_attempts', 'runners get 42501');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.attempts WHERE outcome IN ('released', 'cancelled')), 2,
  'the released claim and the cancel are in the ledger');

SELECT * FROM finish();
ROLLBACK;
