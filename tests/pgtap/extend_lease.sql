-- Tests for mailroom:extend_lease
BEGIN;
SELECT plan(11);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'extend_lease', ARRAY['bigint[]', 'uuid', 'interval']);
SELECT hasnt_function('mailroom', 'extend_lease', ARRAY['bigint[]', 'uuid', 'interval', 'timestamp with time zone'],
  'the v0.3 extend_lease with p_now is gone');
SELECT is_definer('mailroom', 'extend_lease', ARRAY['bigint[]', 'uuid', 'interval']);
SELECT function_privs_are('mailroom', 'extend_lease', ARRAY['bigint[]', 'uuid', 'interval'],
  'mailroom_runner', ARRAY['EXECUTE'], 'runners may extend leases');
SELECT function_privs_are('mailroom', '_extend_lease', ARRAY['bigint[]', 'uuid', 'interval', 'timestamp with time zone'],
  'mailroom_runner', ARRAY[]::text[], 'the clock-pinning twin is owner-only');

SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_send_at => '2030-01-01Z')
FROM unnest(ARRAY['a', 'b']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom._claim_batch('w', 2, '1 minute', NULL, '2030-01-01 00:00Z');

SELECT is(mailroom._extend_lease((SELECT array_agg(id) FROM c), (SELECT lease_token FROM c LIMIT 1), '3 minutes', '2030-01-01 00:00:30Z'),
  2, 'both leases extended');
SELECT is((SELECT DISTINCT leased_until FROM mailroom.queue), '2030-01-01 00:03:30Z'::timestamptz, 'to now + lease');
SELECT is(mailroom._extend_lease((SELECT array_agg(id) FROM c), gen_random_uuid(), '3 minutes', '2030-01-01 00:01Z'),
  0, 'another token extends nothing');
SELECT is(mailroom._reclaim(10000, '2030-01-01 00:02Z'), 0, 'an extended lease is not reclaimed at its original expiry');

SELECT throws_ok($$SELECT mailroom.extend_lease(ARRAY[1]::bigint[], gen_random_uuid(), '2 days')$$, '22023',
  'mailroom: lease: must be more than 0 and at most 1 day, got 2 days', 'lease over a day');
SELECT throws_ok($$SELECT mailroom.extend_lease(NULL, gen_random_uuid(), '1 minute')$$, '22023',
  'mailroom: ids and token: both are required', 'no ids');

SELECT * FROM finish();
ROLLBACK;
