-- Tests for mailroom:view_repeated_attempts
BEGIN;
SELECT plan(9);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;
UPDATE mailroom.settings SET value = '1 second' WHERE key IN ('retry_backoff_base', 'retry_backoff_max');

SELECT has_view('mailroom', 'repeated_attempts', 'repeated_attempts exists');
SELECT view_owner_is('mailroom', 'repeated_attempts', 'mailroom_owner', 'owned by mailroom_owner');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'mailroom.repeated_attempts'::regclass),
  'a security barrier view');
SELECT table_privs_are('mailroom', 'repeated_attempts', 'mailroom_operator', ARRAY['SELECT'], 'operators may read it');

-- Ann (domain in two spellings) gets one mail retried twice and one sent at once;
-- Bob's only mail is sent at once; Cy's claim was released (does not count).
SELECT mailroom.enqueue(a, 'Hi', 'B', p_delivery_key => k, p_now => '2030-01-01Z')
FROM (VALUES ('ann@example.com', 'ann-1'), ('ann@EXAMPLE.com', 'ann-2'), ('bob@example.com', 'bob-1'),
             ('cy@example.com', 'cy-1')) AS v(a, k);
CREATE TEMP TABLE c1 AS SELECT * FROM mailroom.claim_batch('w', 10, '1 minute', NULL, '2030-01-01 00:00:01Z');
SELECT mailroom.mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome',
         CASE delivery_key WHEN 'ann-1' THEN 'retry' ELSE 'sent' END, 'smtp_code', 451) ORDER BY id)
       , '2030-01-01 00:00:02Z')
FROM c1 WHERE delivery_key <> 'cy-1';
SELECT mailroom.release(ARRAY[(SELECT id FROM c1 WHERE delivery_key = 'cy-1')], (SELECT lease_token FROM c1 LIMIT 1), '2030-01-01 00:00:02Z');
CREATE TEMP TABLE c2 AS SELECT * FROM mailroom.claim_batch('w', 10, '1 minute', NULL, '2030-01-01 00:01Z');
SELECT mailroom.mark_outcome(id, lease_token, CASE delivery_key WHEN 'ann-1' THEN 'retry' ELSE 'sent' END,
                             'try later', 451, '4.7.1', NULL, '2030-01-01 00:01:01Z')
FROM c2 ORDER BY id;
CREATE TEMP TABLE c3 AS SELECT * FROM mailroom.claim_batch('w', 10, '1 minute', NULL, '2030-01-01 00:02Z');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', NULL, 250, NULL, NULL, '2030-01-01 00:02:01Z') FROM c3;

SELECT results_eq(
  $$SELECT recipient, messages, repeated_messages, attempts, most_attempts, unsuccessful, successful, duplicates,
           last_outcome, last_smtp_reply
    FROM mailroom.repeated_attempts$$,
  $$VALUES ('ann@example.com'::text, 2::bigint, 1::bigint, 4::bigint, 3, 2::bigint, 2::bigint, 0::bigint,
            'sent'::text, '250'::text)$$,
  'one row per recipient with a mail claimed more than once (domain case folded; released claims ignored)');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.repeated_attempts), 1, 'an operator reads it');
RESET ROLE;
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.repeated_attempts$$, '42501', 'permission denied for view repeated_attempts', 'apps get 42501');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.repeated_attempts$$, '42501', 'permission denied for view repeated_attempts', 'runners get 42501');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.attempts WHERE outcome = 'released'), 1, 'the released claim is in the ledger');

SELECT * FROM finish();
ROLLBACK;
