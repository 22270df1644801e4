-- Tests for mailroom:claim_batch (and its owner-only twin _claim_batch, which pins the clock)
BEGIN;
SELECT plan(63);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;
DELETE FROM mailroom.rate_limits;
DELETE FROM mailroom.domain_budgets;

SELECT has_function('mailroom', 'claim_batch', ARRAY['text', 'integer', 'interval', 'text'], 'claim_batch exists');
SELECT hasnt_function('mailroom', 'claim_batch', ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'],
  'the v0.3 claim_batch with p_now is gone');
SELECT has_function('mailroom', '_claim_batch',
  ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'], '_claim_batch exists');
SELECT is_definer('mailroom', 'claim_batch', ARRAY['text', 'integer', 'interval', 'text'], 'claim_batch is SECURITY DEFINER');
SELECT is_definer('mailroom', '_claim_batch', ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'],
  '_claim_batch is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'claim_batch', ARRAY['text', 'integer', 'interval', 'text'],
  'mailroom_runner', ARRAY['EXECUTE'], 'runners may claim');
SELECT function_privs_are('mailroom', 'claim_batch', ARRAY['text', 'integer', 'interval', 'text'],
  'mailroom_operator', ARRAY[]::text[], 'operators may not claim');
SELECT function_privs_are('mailroom', '_claim_batch', ARRAY['text', 'integer', 'interval', 'text', 'timestamp with time zone'],
  'mailroom_runner', ARRAY[]::text[], 'runners may not pin the clock');
SELECT ok((SELECT NOT (proconfig @> ARRAY['plan_cache_mode=force_custom_plan'])
             FROM pg_proc WHERE oid = 'mailroom._claim_batch(text, integer, interval, text, timestamptz)'::regprocedure),
  'the claim is not re-planned on every call');

-- Six messages at 2030-01-01 00:00; one due later; one of another sender.
SELECT mailroom.enqueue('p0-old@example.com', 'Hi', 'B', p_delivery_key => 'p0-old', p_send_at => '2030-01-01 00:00Z');
SELECT mailroom.enqueue('p0-new@example.com', 'Hi', 'B', p_delivery_key => 'p0-new', p_send_at => '2030-01-01 00:00:30Z');
SELECT mailroom.enqueue('p5@example.com', 'Hi', 'B', p_delivery_key => 'p5', p_priority => 5, p_send_at => '2030-01-01 00:00:40Z');
SELECT mailroom.enqueue('p9-later@example.com', 'Hi', 'B', p_delivery_key => 'p9-later', p_priority => 9, p_send_at => '2030-01-02Z');
SELECT mailroom.enqueue('neg@example.com', 'Hi', 'B', p_delivery_key => 'neg', p_priority => -3, p_send_at => '2030-01-01 00:00Z');
SELECT mailroom.enqueue('bill@example.com', 'Hi', 'B', p_delivery_key => 'bill', p_sender => 'billing', p_send_at => '2030-01-01 00:00:10Z');

CREATE TEMP TABLE first_claim AS
  SELECT * FROM mailroom._claim_batch('worker-1', 3, '2 minutes', NULL, '2030-01-01 00:01Z');
SELECT results_eq($$SELECT delivery_key FROM first_claim$$,
  $$VALUES ('p5'::text), ('p0-old'), ('bill')$$,
  'highest priority first, then oldest run_at; mail due later is not claimed');
SELECT is((SELECT count(DISTINCT lease_token)::int FROM first_claim), 1, 'one lease token per batch');
SELECT results_eq($$SELECT DISTINCT leased_until, attempt FROM first_claim$$,
  $$VALUES ('2030-01-01 00:03Z'::timestamptz, 1)$$, 'leased for the lease interval; first attempt');
SELECT results_eq(
  $$SELECT q.status, q.worker, q.claimed_at, q.attempts FROM mailroom.queue q JOIN first_claim f USING (id) WHERE f.delivery_key = 'p5'$$,
  $$VALUES ('sending'::text, 'worker-1'::text, '2030-01-01 00:01Z'::timestamptz, 1)$$,
  'the queue row is sending, with its worker, claim time and attempt count');
SELECT is_empty(
  $$SELECT FROM mailroom.attempts WHERE lease_token = (SELECT lease_token FROM first_claim LIMIT 1)$$,
  'a claim writes no ledger row: the lease is on the queue row until it ends');
SELECT results_eq(
  $$SELECT to_address, subject, body_text, headers, template_key, on_ambiguous, sender FROM first_claim WHERE delivery_key = 'p0-old'$$,
  $$VALUES ('p0-old@example.com'::text, 'Hi'::text, 'B'::text, '{}'::jsonb, NULL::text, 'retry'::text, 'default'::text)$$,
  'returns what a runner needs to build the mail (content joined from contents)');

SELECT results_eq($$SELECT delivery_key FROM mailroom._claim_batch('worker-2', 10, '2 minutes', 'default', '2030-01-01 00:01Z')$$,
  $$VALUES ('p0-new'::text), ('neg')$$,
  'a second claim gets only what is left, filtered by sender, negative priority last');
SELECT is_empty($$SELECT * FROM mailroom._claim_batch('worker-3', 10, '2 minutes', NULL, '2030-01-01 00:01Z')$$,
  'nothing left that is due');
SELECT results_eq($$SELECT delivery_key FROM mailroom._claim_batch('worker-3', 10, '2 minutes', NULL, '2030-01-02Z')$$,
  $$VALUES ('p9-later'::text)$$, 'mail becomes claimable when its run_at passes');
SELECT mailroom.enqueue('neg7@example.com', 'Hi', 'B', p_delivery_key => 'neg7', p_priority => -7, p_send_at => '2030-01-02Z');
SELECT results_eq($$SELECT delivery_key FROM mailroom._claim_batch('worker-3', 10, '2 minutes', NULL, '2030-01-02Z')$$,
  $$VALUES ('neg7'::text)$$, 'mail of a negative priority alone is claimed (no mail above 0: the scan starts at 0 and moves on)');
SELECT results_eq($$SELECT count(*)::int FROM mailroom.claim_batch('worker-now', 10)$$, $$VALUES (0)$$,
  'the public claim_batch uses the database clock: mail due in 2030 is not due now');

-- Paused and review mail is never handed out.
SELECT mailroom.enqueue('held@example.com', 'Hi', 'B', p_delivery_key => 'held', p_send_at => '2030-01-01Z');
UPDATE mailroom.queue SET status = 'paused' WHERE id = (SELECT id FROM mailroom.contents WHERE delivery_key = 'held');
SELECT is_empty($$SELECT * FROM mailroom._claim_batch('worker-4', 10, '2 minutes', NULL, '2030-01-03Z')$$,
  'paused mail is not claimed');

-- The gate. Campaign and schedule mail is written as enqueue_campaign and
-- materialize_schedules write it (content + live row).
INSERT INTO mailroom.templates (key, subject, body_text) VALUES ('gate', 'S', 'B') ON CONFLICT DO NOTHING;
INSERT INTO mailroom.campaigns (name, template_key, send_at, status, time_zone, window_start, window_end)
VALUES ('gate-paused', 'gate', '2030-01-01Z', 'paused', 'UTC', NULL, NULL),
       ('gate-cancelled', 'gate', '2030-01-01Z', 'cancelled', 'UTC', NULL, NULL),
       ('gate-window', 'gate', '2030-01-01Z', 'active', 'Europe/Berlin', '09:00', '17:00'),
       ('gate-open', 'gate', '2030-01-01Z', 'active', 'UTC', NULL, NULL);
INSERT INTO mailroom.schedules (schedule_key, to_address, time_zone, rule, template_key, active)
VALUES ('gate-off', 'sched@example.com', 'UTC', '0 9 * * *', 'gate', false);
CREATE FUNCTION pg_temp.mail(p_key text, p_to text, p_campaign text DEFAULT NULL, p_schedule text DEFAULT NULL,
                             p_zone text DEFAULT NULL) RETURNS bigint LANGUAGE sql AS $$
  WITH c AS (
    INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id, schedule_id, recipient_id, recipient_zone)
    VALUES (p_key, p_to, 'gate', (SELECT id FROM mailroom.campaigns WHERE name = p_campaign),
            (SELECT id FROM mailroom.schedules WHERE schedule_key = p_schedule),
            CASE WHEN p_campaign IS NOT NULL THEN p_key END, p_zone)
    RETURNING id, sender, campaign_id, max_attempts, on_ambiguous)
  INSERT INTO mailroom.queue (id, run_at, sender, campaign_id, max_attempts, on_ambiguous, updated_at)
  SELECT id, '2030-04-01 05:00Z', sender, campaign_id, max_attempts, on_ambiguous, '2030-04-01 05:00Z' FROM c RETURNING id
$$;
UPDATE mailroom.queue SET status = 'review' WHERE status = 'queued';
SELECT pg_temp.mail('g-sup', 'Gone@Example.COM');
SELECT pg_temp.mail('g-paused', 'p@example.com', 'gate-paused');
SELECT pg_temp.mail('g-cancelled', 'c@example.com', 'gate-cancelled');
SELECT pg_temp.mail('g-window', 'w@example.com', 'gate-window');
SELECT pg_temp.mail('g-window-ny', 'ny@example.com', 'gate-window', NULL, 'America/New_York');
SELECT pg_temp.mail('g-sched', 'sched@example.com', NULL, 'gate-off');
SELECT pg_temp.mail('g-ok', 'ok@example.com', 'gate-open');
INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('Gone@example.com', 'Gone@example.com', 'unsubscribed');
-- 2030-04-01 06:00Z: 08:00 in Berlin (the window opens at 09:00 = 07:00Z), 02:00 in New York (13:00Z).
SELECT results_eq($$SELECT delivery_key FROM mailroom._claim_batch('gate', 10, '1 minute', NULL, '2030-04-01 06:00Z')$$,
  $$VALUES ('g-ok'::text)$$, 'the gate hands out only the mail that may leave now');
SELECT results_eq(
  $$SELECT c.delivery_key, a.outcome, a.finished_as, a.status_reason, a.attempt FROM mailroom.attempts a
    JOIN mailroom.contents c ON c.id = a.message_id WHERE c.delivery_key LIKE 'g-%' ORDER BY 1$$,
  $$VALUES ('g-cancelled'::text, 'cancelled'::text, 'cancelled'::text, 'campaign_cancelled'::text, 0),
           ('g-sched', 'cancelled', 'cancelled', 'schedule_inactive', 0),
           ('g-sup', 'cancelled', 'cancelled', 'suppressed', 0)$$,
  'suppressed, cancelled-campaign and inactive-schedule mail is finished cancelled, with its reason, in the ledger');
SELECT is_empty($$SELECT FROM mailroom.queue q JOIN mailroom.contents c USING (id) WHERE c.delivery_key IN ('g-sup', 'g-cancelled', 'g-sched')$$,
  '... and leaves the hot queue');
SELECT results_eq($$SELECT q.status, q.status_reason FROM mailroom.queue q JOIN mailroom.contents c USING (id) WHERE c.delivery_key = 'g-paused'$$,
  $$VALUES ('paused'::text, 'campaign_paused'::text)$$, 'mail of a paused campaign is held as paused');
SELECT results_eq($$SELECT c.delivery_key, q.status, q.run_at FROM mailroom.queue q JOIN mailroom.contents c USING (id)
                    WHERE c.delivery_key LIKE 'g-window%' ORDER BY 1$$,
  $$VALUES ('g-window'::text, 'queued'::text, '2030-04-01 07:00Z'::timestamptz),
           ('g-window-ny', 'queued', '2030-04-01 13:00Z')$$,
  'mail outside its send window is moved to the next opening, in the recipient''s zone when known');
SELECT results_eq($$SELECT delivery_key FROM mailroom._claim_batch('gate', 10, '1 minute', NULL, '2030-04-01 07:00Z')$$,
  $$VALUES ('g-window'::text)$$, 'and is claimed once the window opens');
SELECT results_eq($$SELECT count(*)::int FROM mailroom.attempts WHERE finished_as IS NOT NULL$$, $$VALUES (3)$$,
  'one finishing row per finished mail');

-- A gate failure does not shorten the batch while other mail is due.
SELECT pg_temp.mail('fill-' || g, CASE WHEN g <= 3 THEN 'Gone@example.com' ELSE 'f' || g || '@example.com' END)
  FROM generate_series(1, 8) g;
SELECT results_eq($$SELECT count(*)::int FROM mailroom._claim_batch('fill', 4, '1 minute', NULL, '2030-04-01 12:00Z')$$,
  $$VALUES (4)$$, 'three suppressed mails at the head of the queue: the claim still returns four');
SELECT is((SELECT count(*)::int FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id
           WHERE c.delivery_key LIKE 'fill-%' AND a.status_reason = 'suppressed'), 3, '... and the three are cancelled');
DELETE FROM mailroom.queue WHERE status = 'queued';

-- The gate keys most mail by its stored to_domain; an address with two @
-- (which no enqueue takes, but a row may hold) is keyed by _address_key
-- itself, as suppress keys it: part 2 is not the last part.
SELECT pg_temp.mail('g-sup-2at', '"x@y"@Example.com');
INSERT INTO mailroom.suppressions (address_key, address, reason)
VALUES (mailroom._address_key('"x@y"@Example.com'), '"x@y"@Example.com', 'unsubscribed');
SELECT is_empty($$SELECT FROM mailroom._claim_batch('gate-2at', 10, '1 minute', NULL, '2030-04-01 12:00Z')$$,
  'mail to an address with two @ meets its suppression too');
SELECT is((SELECT a.status_reason FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id
           WHERE c.delivery_key = 'g-sup-2at'), 'suppressed', '... and is finished cancelled as suppressed');

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
SELECT is((SELECT count(*)::int FROM mailroom.queue WHERE status = 'paused'), 2, 'and changed no queue row');

-- Send rates: a sender limit caps the batch, a domain at its limit is skipped
-- while other domains' mail is taken, and budgets free up a window later.
DELETE FROM mailroom.rate_limits;
DELETE FROM mailroom.domain_budgets;
DELETE FROM mailroom.queue;
SELECT mailroom.enqueue('u' || g || '@capped.test', 'Hi', 'B', p_delivery_key => 'cap-' || g, p_send_at => '2030-02-01Z')
  FROM generate_series(1, 10) g;
SELECT mailroom.enqueue('u' || g || '@other.test', 'Hi', 'B', p_delivery_key => 'oth-' || g, p_send_at => '2030-02-01 00:00:01Z')
  FROM generate_series(1, 10) g;
SELECT mailroom.enqueue('u' || g || '@bulk.test', 'Hi', 'B', p_delivery_key => 'bulk-' || g, p_sender => 'bulk', p_send_at => '2030-02-01Z')
  FROM generate_series(1, 10) g;
UPDATE mailroom.queue SET updated_at = '2030-02-01Z';
SELECT mailroom.set_domain_limits('capped.test', 3);
SELECT mailroom.set_sender_limits('bulk', 4);

SELECT results_eq($$SELECT count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', 'bulk', '2030-02-01 00:01:00Z')$$,
  $$VALUES (4)$$, 'a sender limited to 4/s gets 4 of its 10 queued mails');
SELECT is_empty($$SELECT * FROM mailroom._claim_batch('w', 100, '1 minute', 'bulk', '2030-02-01 00:01:00.5Z')$$,
  'within the same second: nothing more for that sender');
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:00.6Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('capped.test'::text, 3), ('other.test', 10)$$,
  'any-sender claim: 3 for the capped domain, all of the other domain, none for the limited sender');
SELECT is_empty($$SELECT * FROM mailroom._claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:00.7Z')$$,
  'the capped domain is skipped while at its limit');
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom._claim_batch('w', 2, '1 minute', NULL, '2030-02-01 00:01:01.1Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('bulk.test'::text, 2)$$, 'a window later the oldest due mail flows again, within p_limit');
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:01.7Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('bulk.test'::text, 2), ('capped.test', 3)$$, 'each budget caps its own mail in one batch');
SELECT results_eq($$SELECT key COLLATE "default", slot_hits FROM mailroom.rate_limits WHERE cardinality(slot_hits) > 0 ORDER BY key$$,
  $$VALUES ('mailroom/sender/bulk/s'::text, ARRAY[4, 2, 2])$$,
  'the sender''s budget records what was claimed');
SELECT results_eq($$SELECT domain COLLATE "default", mailroom._window_hits(second_counts) FROM mailroom.domain_budgets ORDER BY domain$$,
  $$VALUES ('capped.test'::text, ARRAY[3, 3])$$,
  'so do the domains'' (one row per domain, its per-second window; a domain with no limit records nothing)');
SELECT mailroom.set_domain_limits('*', 1);
SELECT mailroom.enqueue('late@other.test', 'Hi', 'B', p_delivery_key => 'oth-late', p_send_at => '2030-02-01Z');
SELECT mailroom.enqueue('late2@other.test', 'Hi', 'B', p_delivery_key => 'oth-late2', p_send_at => '2030-02-01Z');
UPDATE mailroom.queue SET updated_at = '2030-02-01Z' WHERE status = 'queued';
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:03Z') GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('bulk.test'::text, 1), ('capped.test', 3), ('other.test', 1)$$,
  'the default row (1/s) limits every domain without a row of its own, each on its own; capped.test keeps its 3/s');
SELECT is((SELECT mailroom._window_hits(second_counts) FROM mailroom.domain_budgets WHERE domain = 'other.test'), ARRAY[1],
  'a default-limited domain records its sends');

-- A pick the gate refuses gives its domain's grant back: the budget records
-- only what was claimed.
SELECT mailroom.set_domain_limits('giveback.test', 5);
SELECT mailroom.enqueue('gb' || g || '@giveback.test', 'Hi', 'B', p_delivery_key => 'gb-' || g, p_send_at => '2030-02-01Z')
  FROM generate_series(1, 3) g;
UPDATE mailroom.queue SET updated_at = '2030-02-01Z' WHERE status = 'queued';
INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('gb2@giveback.test', 'gb2@giveback.test', 'unsubscribed');
SELECT results_eq($$SELECT count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:01:05Z') WHERE to_address LIKE '%@giveback.test'$$,
  $$VALUES (2)$$, 'two of three picked mails to a limited domain are claimed, the suppressed one is not');
SELECT is((SELECT mailroom._window_hits(second_counts) FROM mailroom.domain_budgets WHERE domain = 'giveback.test'), ARRAY[2],
  'the domain''s budget is charged with the two claimed');

-- A per-minute limit alone (no default domain limit any more).
SELECT mailroom.set_domain_limits('*', NULL, NULL);
SELECT mailroom.enqueue('m' || g || '@minute.test', 'Hi', 'B', p_delivery_key => 'min-' || g, p_sender => 'minutely', p_send_at => '2030-02-01Z')
  FROM generate_series(1, 8) g;
UPDATE mailroom.queue SET updated_at = '2030-02-01Z' WHERE status = 'queued';
SELECT mailroom.set_sender_limits('minutely', NULL, 5);
SELECT results_eq($$SELECT count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', 'minutely', '2030-02-01 00:02:00Z')$$,
  $$VALUES (5)$$, 'a sender limited to 5 per minute gets 5');
SELECT is_empty($$SELECT * FROM mailroom._claim_batch('w', 100, '1 minute', 'minutely', '2030-02-01 00:02:30Z')$$,
  'and nothing more within that minute');
SELECT results_eq($$SELECT count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', 'minutely', '2030-02-01 00:03:02Z')$$,
  $$VALUES (3)$$, 'a minute (and a slot) later the rest');

-- With no sender limited, a domain's grant alone caps its mail in a batch:
-- the candidates are all picked only when every domain granted all they
-- asked for.
DELETE FROM mailroom.senders;
SELECT mailroom.set_domain_limits('solo.test', 2);
SELECT mailroom.enqueue('s' || g || '@solo.test', 'Hi', 'B', p_delivery_key => 'solo-' || g, p_send_at => '2030-02-01Z')
  FROM generate_series(1, 5) g;
SELECT mailroom.enqueue('f' || g || '@free.test', 'Hi', 'B', p_delivery_key => 'free-' || g, p_send_at => '2030-02-01Z')
  FROM generate_series(1, 3) g;
UPDATE mailroom.queue SET updated_at = '2030-02-01Z' WHERE status = 'queued';
SELECT results_eq($$SELECT split_part(to_address, '@', 2), count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:04:00Z') WHERE to_address ~ '@(solo|free)\.test$' GROUP BY 1 ORDER BY 1$$,
  $$VALUES ('free.test'::text, 3), ('solo.test', 2)$$,
  'no sender limited: a domain limited to 2/s gets 2 of its 5, an unlimited one all of its 3');
SELECT results_eq($$SELECT count(*)::int FROM mailroom._claim_batch('w', 100, '1 minute', NULL, '2030-02-01 00:04:01.5Z') WHERE to_address LIKE '%@solo.test'$$,
  $$VALUES (2)$$, 'a window later 2 more, every candidate''s domain granting all it asked for');

-- A claim whose transaction began before a release handed the mail back
-- (its p_now is earlier than the release) is stamped when the mail was free:
-- the ledger never shows two leases of one message at once.
SELECT mailroom.enqueue('hb@handback.test', 'Hi', 'B', p_delivery_key => 'handback', p_sender => 'handback',
                        p_send_at => '2030-03-01Z');
UPDATE mailroom.queue SET updated_at = '2030-03-01Z' WHERE status = 'queued';
CREATE TEMP TABLE handback AS
  SELECT * FROM mailroom._claim_batch('w-a', 1, '1 minute', 'handback', '2030-03-01 00:00:01Z');
SELECT mailroom._release(ARRAY(SELECT id FROM handback), (SELECT lease_token FROM handback), '2030-03-01 00:00:05Z');
CREATE TEMP TABLE handback_again AS
  SELECT * FROM mailroom._claim_batch('w-b', 1, '1 minute', 'handback', '2030-03-01 00:00:04Z');
SELECT results_eq($$SELECT q.claimed_at FROM handback_again c JOIN mailroom.queue q ON q.id = c.id$$,
  $$VALUES ('2030-03-01 00:00:05Z'::timestamptz)$$,
  'a claim that began before the release is stamped at the release');
SELECT mailroom._mark_outcome(id, lease_token, 'sent', p_now => '2030-03-01 00:00:06Z') FROM handback_again;
SELECT is((SELECT count(*)::int FROM mailroom.attempts a JOIN mailroom.attempts b
             ON a.message_id = b.message_id AND a.id < b.id
            JOIN mailroom.contents c ON c.id = a.message_id
            WHERE c.delivery_key = 'handback' AND b.claimed_at < a.finished_at), 0,
  'the two attempts of the handed-back mail do not overlap');

SET LOCAL ROLE mailroom_runner;
SELECT lives_ok($$SELECT * FROM mailroom.claim_batch('as-runner', 1)$$, 'the runner role can claim');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('as-runner', 1, p_now => '2100-01-01')$$, '42883', NULL,
  'issue 13 hole 4: a runner cannot name a clock (no claim_batch with p_now)');
SELECT throws_ok($$SELECT * FROM mailroom._claim_batch('as-runner', 1, '1 minute', NULL, '2100-01-01')$$, '42501', NULL,
  'issue 13 hole 4: nor call the owner-only twin');
SELECT throws_ok($$UPDATE mailroom.queue SET status = 'queued'$$, '42501', 'permission denied for table queue',
  'the runner role cannot write the queue directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
