-- Tests for mailroom:release
BEGIN;
SELECT plan(10);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'release', ARRAY['bigint[]', 'uuid']);
SELECT hasnt_function('mailroom', 'release', ARRAY['bigint[]', 'uuid', 'timestamp with time zone'], 'the v0.3 release with p_now is gone');
SELECT is_definer('mailroom', 'release', ARRAY['bigint[]', 'uuid']);
SELECT function_privs_are('mailroom', 'release', ARRAY['bigint[]', 'uuid'],
  'mailroom_runner', ARRAY['EXECUTE'], 'runners may release');
SELECT function_privs_are('mailroom', '_release', ARRAY['bigint[]', 'uuid', 'timestamp with time zone'],
  'mailroom_runner', ARRAY[]::text[], 'the clock-pinning twin is owner-only');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_send_at => '2030-01-01Z')
FROM unnest(ARRAY['a', 'b']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom._claim_batch('w', 2, '1 minute', NULL, '2030-01-01 00:00Z');

SELECT is(mailroom._release((SELECT array_agg(id) FROM c WHERE delivery_key = 'a'), (SELECT lease_token FROM c LIMIT 1), '2030-01-01 00:00:10Z'),
  1, 'one claim handed back');
SELECT results_eq($$SELECT status, attempts, lease_token FROM mailroom.messages WHERE delivery_key = 'a'$$,
  $$VALUES ('queued'::text, 0, NULL::uuid)$$, 'queued again, the attempt not counted');
SELECT is((SELECT outcome FROM mailroom.attempts a JOIN c ON c.id = a.message_id WHERE c.delivery_key = 'a'), 'released',
  'the ledger shows the release');
SELECT is(mailroom.release((SELECT array_agg(id) FROM c), gen_random_uuid()), 0, 'another token releases nothing');
SELECT throws_ok($$SELECT mailroom.release(ARRAY[1]::bigint[], NULL)$$, '22023',
  'mailroom: ids and token: both are required', 'no token');

SELECT * FROM finish();
ROLLBACK;
