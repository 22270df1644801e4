-- Tests for mailroom:claim_batch
BEGIN;
SELECT plan(38);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_function('mailroom', 'claim_batch',
  ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'], 'claim_batch exists');
SELECT is_definer('mailroom', 'claim_batch',
  ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'], 'claim_batch is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'claim_batch',
  ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'], 'mailroom_runner', ARRAY['EXECUTE'],
  'runners may claim');
SELECT function_privs_are('mailroom', 'claim_batch',
  ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'], 'mailroom_operator', ARRAY[]::text[],
  'operators may not claim');

-- Six messages at 2030-01-01 00:00; one due later; one of another sender.
SELECT mailroom.enqueue('p0-old@example.com', 'Hi', 'B', p_delivery_key => 'p0-old', p_send_at => '2030-01-01 00:00Z', p_now => '2030-01-01 00:00Z');
SELECT mailroom.enqueue('p0-new@example.com', 'Hi', 'B', p_delivery_key => 'p0-new', p_send_at => '2030-01-01 00:00:30Z', p_now => '2030-01-01 00:00Z');
SELECT mailroom.enqueue('p5@example.com', 'Hi', 'B', p_delivery_key => 'p5', p_priority => 5, p_send_at => '2030-01-01 00:00:40Z', p_now => '2030-01-01 00:00Z');
SELECT mailroom.enqueue('p9-later@example.com', 'Hi', 'B', p_delivery_key => 'p9-later', p_priority => 9, p_send_at => '2030-01-02Z', p_now => '2030-01-01 00:00Z');
SELECT mailroom.enqueue('neg@example.com', 'Hi', 'B', p_delivery_key => 'neg', p_priority => -3, p_send_at => '2030-01-01 00:00Z', p_now => '2030-01-01 00:00Z');
SELECT mailroom.enqueue('bill@example.com', 'Hi', 'B', p_delivery_key => 'bill', p_sender => 'billing', p_send_at => '2030-01-01 00:00:10Z', p_now => '2030-01-01 00:00Z');

CREATE TEMP TABLE first_claim AS
  SELECT * FROM mailroom.claim_batch('worker-1', 3, '2 minutes', NULL, '2030-01-01 00:01Z');
SELECT results_eq($$SELECT delivery_key FROM first_claim$$,
  $$VALUES ('p5'::text), ('p0-old'), ('bill')$$,
  'highest priority first, then oldest run_at; mail due later is not claimed');
SELECT is((SELECT count(DISTINCT lease_token)::int FROM first_claim), 1, 'one lease token per batch');
SELECT results_eq($$SELECT DISTINCT leased_until, attempt FROM first_claim$$,
  $$VALUES ('2030-01-01 00:03Z'::timestamptz, 1)$$, 'leased for the lease interval; first attempt');
SELECT results_eq(
  $$SELECT status, worker, claimed_at, attempts FROM mailroom.messages WHERE delivery_key = 'p5'$$,
  $$VALUES ('sending'::text, 'worker-1'::text, '2030-01-01 00:01Z'::timestamptz, 1)$$,
  'the row is sending, with its worker, claim time and attempt count');
SELECT is_empty(
  $$SELECT FROM mailroom.attempts WHERE lease_token = (SELECT lease_token FROM first_claim LIMIT 1)$$,
  'a claim writes no ledger row: the lease is on the message until it ends');
SELECT results_eq(
  $$SELECT to_address, subject, body_text, headers, template_key, on_ambiguous FROM first_claim WHERE delivery_key = 'p0-old'$$,
  $$VALUES ('p0-old@example.com'::text, 'Hi'::text, 'B'::text, '{}'::jsonb, NULL::text, 'retry'::text)$$,
  'returns what a runner needs to build the mail');

SELECT results_eq($$SELECT delivery_key FROM mailroom.claim_batch('worker-2', 10, '2 minutes', 'default', '2030-01-01 00:01Z')$$,
  $$VALUES ('p0-new'::text), ('neg')$$,
  'a second claim gets only what is left, filtered by sender, negative priority last');
SELECT is_empty($$SELECT * FROM mailroom.claim_batch('worker-3', 10, '2 minutes', NULL, '2030-01-01 00:01Z')$$,
  'nothing left that is due');
SELECT results_eq($$SELECT delivery_key FROM mailroom.claim_batch('worker-3', 10, '2 minutes', NULL, '2030-01-02Z')$$,
  $$VALUES ('p9-later'::text)$$, 'mail becomes claimable when its run_at passes');

-- Paused, cancelled and review mail is never handed out.
SELECT mailroom.enqueue('held@example.com', 'Hi', 'B', p_delivery_key => 'held', p_now => '2030-01-01 00:00Z');
UPDATE mailroom.messages SET status = 'paused' WHERE delivery_key = 'held';
SELECT is_empty($$SELECT * FROM mailroom.claim_batch('worker-4', 10, '2 minutes', NULL, '2030-01-03Z')$$,
  'paused mail is not claimed');

-- Bad input
CREATE TEMP TABLE before_errors AS SELECT count(*) AS n FROM mailroom.attempts;
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('w', 0)$$, '22023',
  'mailroom: limit: must be between 1 and 10000, got 0', 'limit 0');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('w', -5)$$, '22023',
  'mailroom: limit: must be between 1 and 10000, got -5', 'negative limit');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('w', 10001)$$, '22023',
  'mailroom: limit: must be between 1 and 10000, got 10001', 'limit over 10,000');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('w', 10, '0 seconds')$$, '22023',
  'mailroom: lease: must be more than 0 and at most 1 day, got 00:00:00', 'zero lease');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('w', 10, '25 hours')$$, '22023',
  'mailroom: lease: must be more than 0 and at most 1 day, got 25:00:00', 'lease over a day');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('', 10)$$, '22023',
  'mailroom: worker: must be 1 to 200 characters', 'empty worker name');
SELECT is((SELECT count(*) FROM mailroom.attempts), (SELECT n FROM before_errors), 'refused claims wrote nothing');
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE status = 'paused'), 1, 'and changed no message');

-- Send rates: a sender limit caps the batch, a domain at its limit is skipped
-- while other domains' mail is taken, and budgets free up a window later.
DELETE FROM mailroom.rate_limits;
UPDATE mailroom.messages SET status = 'cancelled', lease_token = NULL, leased_until = NULL WHERE status IN ('queued', 'sending', 'paused');
SELECT mailroom.enqueue('u' || g || '@capped.test', 'Hi', 'B', p_delivery_key => 'cap-' || g, p_send_at => '2030-02-01Z', p_now => '2030-02-01Z')
  FROM generate_series(1, 10) g;
SELECT mailroom.enqueue('u' || g || '@other.test', 'Hi', 'B', p_delivery_key => 'oth-' || g, p_send_at => '2030-02-01 00:00:01Z', p_now => '2030-02-01Z')
  FROM generate_series(1, 10) g;
SELECT mailroom.enqueue('u' || g || '@bulk.test', 'Hi', 'B', p_delivery_key => 'bulk-' || g, p_sender => 'bulk', p_send_at => '2030-02-01Z', p_now => '2030-02-01Z')
  FROM generate_series(1, 10) g;
SELECT mailroom.set_domain_limits('capped.test', 3);
SELECT mailroom.set_sender_limits('bulk', 4);

SELECT results_eq($$SELECT count(*)::int FROM mailroom.claim_batch('w', 100, '1 minute', 'bulk', '2030-02-01 00:01:00Z')$$,
  $$VALUES (4)$$, 'a sender limited to 4/s gets 4 of its 10 queued mails');
SELECT is_empty($$SELECT * FROM mailroom.claim_batch('w', 100, '1 minute', 'bulk', '2030-02-01 00:01:00.5Z')$$,
  'within the same second: nothing more for that sender');
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom.claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:00.6Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('capped.test'::text, 3), ('other.test', 10)$$,
  'any-sender claim: 3 for the capped domain, all of the other domain, none for the limited sender');
SELECT is_empty($$SELECT * FROM mailroom.claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:00.7Z')$$,
  'the capped domain is skipped while at its limit');
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom.claim_batch('w', 2, '1 minute', NULL, '2030-02-01 00:01:01.1Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('bulk.test'::text, 2)$$, 'a window later the oldest due mail flows again, within p_limit');
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom.claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:01.7Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('bulk.test'::text, 2), ('capped.test', 3)$$, 'each budget caps its own mail in one batch');
SELECT results_eq($$SELECT key COLLATE "default", slot_hits FROM mailroom.rate_limits ORDER BY key$$,
  $$VALUES ('mailroom/domain/capped.test/s'::text, ARRAY[3, 3]), ('mailroom/sender/bulk/s', ARRAY[4, 2, 2])$$,
  'budgets record what was claimed (a domain with no limit records nothing)');
SELECT mailroom.set_domain_limits('*', 1);
SELECT mailroom.enqueue('late@other.test', 'Hi', 'B', p_delivery_key => 'oth-late', p_send_at => '2030-02-01Z', p_now => '2030-02-01Z');
SELECT mailroom.enqueue('late2@other.test', 'Hi', 'B', p_delivery_key => 'oth-late2', p_send_at => '2030-02-01Z', p_now => '2030-02-01Z');
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom.claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:03Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('bulk.test'::text, 1), ('capped.test', 3), ('other.test', 1)$$,
  'the default row (1/s) limits every domain without a row of its own, each on its own; capped.test keeps its 3/s');
SELECT is((SELECT slot_hits FROM mailroom.rate_limits WHERE key = 'mailroom/domain/other.test/s'), ARRAY[1],
  'a default-limited domain records its sends');

-- A per-minute limit alone (no default domain limit any more).
SELECT mailroom.set_domain_limits('*', NULL, NULL);
SELECT mailroom.enqueue('m' || g || '@minute.test', 'Hi', 'B', p_delivery_key => 'min-' || g, p_sender => 'minutely', p_send_at => '2030-02-01Z', p_now => '2030-02-01Z')
  FROM generate_series(1, 8) g;
SELECT mailroom.set_sender_limits('minutely', NULL, 5);
SELECT results_eq($$SELECT count(*)::int FROM mailroom.claim_batch('w', 100, '1 minute', 'minutely', '2030-02-01 00:02:00Z')$$,
  $$VALUES (5)$$, 'a sender limited to 5 per minute gets 5');
SELECT is_empty($$SELECT * FROM mailroom.claim_batch('w', 100, '1 minute', 'minutely', '2030-02-01 00:02:30Z')$$,
  'and nothing more within that minute');
SELECT results_eq($$SELECT count(*)::int FROM mailroom.claim_batch('w', 100, '1 minute', 'minutely', '2030-02-01 00:03:02Z')$$,
  $$VALUES (3)$$, 'a minute (and a slot) later the rest');

-- A claim whose transaction began before a release handed the mail back
-- (its p_now is earlier than the release) is stamped when the mail was free:
-- the ledger never shows two leases of one message at once.
SELECT mailroom.enqueue('hb@handback.test', 'Hi', 'B', p_delivery_key => 'handback', p_sender => 'handback',
                        p_send_at => '2030-03-01Z', p_now => '2030-03-01Z');
CREATE TEMP TABLE handback AS
  SELECT * FROM mailroom.claim_batch('w-a', 1, '1 minute', 'handback', '2030-03-01 00:00:01Z');
SELECT mailroom.release(ARRAY(SELECT id FROM handback), (SELECT lease_token FROM handback), '2030-03-01 00:00:05Z');
CREATE TEMP TABLE handback_again AS
  SELECT * FROM mailroom.claim_batch('w-b', 1, '1 minute', 'handback', '2030-03-01 00:00:04Z');
SELECT mailroom.mark_outcome(id, lease_token, 'sent', p_now => '2030-03-01 00:00:06Z') FROM handback_again;
SELECT results_eq(
  $$SELECT m.claimed_at, a.claimed_at FROM handback_again c
    JOIN mailroom.messages m ON m.id = c.id JOIN mailroom.attempts a ON a.message_id = c.id AND a.lease_token = c.lease_token$$,
  $$VALUES ('2030-03-01 00:00:05Z'::timestamptz, '2030-03-01 00:00:05Z'::timestamptz)$$,
  'a claim that began before the release is stamped at the release, on the message and in the ledger');
SELECT is((SELECT count(*)::int FROM mailroom.attempts a JOIN mailroom.attempts b
             ON a.message_id = b.message_id AND a.id < b.id
            WHERE a.delivery_key = 'handback' AND b.claimed_at < a.finished_at), 0,
  'the two attempts of the handed-back mail do not overlap');

SET LOCAL ROLE mailroom_runner;
SELECT lives_ok($$SELECT * FROM mailroom.claim_batch('as-runner', 1)$$, 'the runner role can claim');
SELECT throws_ok($$UPDATE mailroom.messages SET status = 'sent'$$, '42501', 'permission denied for table messages',
  'the runner role cannot write the table directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
