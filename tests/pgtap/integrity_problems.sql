-- Tests for mailroom:integrity_problems
BEGIN;
SELECT plan(14);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_function('mailroom', 'integrity_problems', ARRAY[]::text[], 'integrity_problems exists');
SELECT is_definer('mailroom', 'integrity_problems', ARRAY[]::text[], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'integrity_problems', ARRAY[]::text[], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators may run the check');
SELECT function_privs_are('mailroom', 'integrity_problems', ARRAY[]::text[], 'mailroom_app', ARRAY[]::text[], 'apps may not');

-- A healthy queue of every state: queued, leased, in review, sent, failed, cancelled.
SELECT pg_temp.t_mail(k, p_on_ambiguous => CASE k WHEN 'review' THEN 'review' ELSE 'retry' END, p_at => '2030-01-01Z')
FROM unnest(ARRAY['queued', 'leased', 'review', 'sent', 'failed', 'cancelled', 'gone', 'both', 'orphan-ledger']) k;
SELECT pg_temp.t_claim(k, 'w', '2030-01-01 00:01Z') FROM unnest(ARRAY['leased', 'review', 'sent', 'failed', 'both']) k;
SELECT pg_temp.t_end('review', 'expired', '2030-01-01 00:03Z');
SELECT pg_temp.t_end('sent', 'sent', '2030-01-01 00:02Z', 'sent');
SELECT pg_temp.t_end('failed', 'failed', '2030-01-01 00:02Z', 'failed');
SELECT pg_temp.t_end('both', 'sent', '2030-01-01 00:02Z', 'sent');
SELECT pg_temp.t_decide(k, 'cancelled', 'cancelled', 'test', '2030-01-01 00:02Z') FROM unnest(ARRAY['cancelled', 'gone', 'orphan-ledger']) k;
SELECT is_empty($$SELECT * FROM mailroom.integrity_problems()$$, 'a healthy queue has no problems');

-- Break each invariant, as only a bug (or a hand on the tables) could.
-- contents without queue row or finishing row: the finishing row is lost.
DELETE FROM mailroom.attempts WHERE message_id = pg_temp.t_id('gone');
-- both: the sent mail's queue row comes back.
INSERT INTO mailroom.queue (id, sender, max_attempts, on_ambiguous) VALUES (pg_temp.t_id('both'), 'default', 5, 'retry');
-- a queue row without contents.
INSERT INTO mailroom.queue (id, sender, max_attempts, on_ambiguous) VALUES (900000001, 'default', 5, 'retry');
-- ledger rows without contents: a live mail's attempt, and a finished mail whose contents went.
INSERT INTO mailroom.attempts (message_id, attempt, worker, claimed_at, finished_at, outcome, finish_key)
VALUES (900000002, 1, 'w', '2030-01-01Z', '2030-01-01 00:01Z', 'retry', nextval('mailroom.attempts_id_seq')),
       (900000002, 2, 'w', '2030-01-01 00:02Z', '2030-01-01 00:03Z', 'retry', nextval('mailroom.attempts_id_seq'));
CREATE TEMP TABLE orphan AS SELECT pg_temp.t_id('orphan-ledger') AS id;
DELETE FROM mailroom.contents WHERE id = (SELECT id FROM orphan);
-- ids of a campaign and a schedule that do not exist (contents has no foreign keys).
INSERT INTO mailroom.contents (id, delivery_key, to_address, subject, body_text, campaign_id, recipient_id, schedule_id)
VALUES (900000003, 'stray', 'stray@example.com', 's', 'b', 900000004, 'r', 900000005);
INSERT INTO mailroom.queue (id, sender, campaign_id, max_attempts, on_ambiguous) VALUES (900000003, 'default', 900000004, 5, 'retry');

SELECT results_eq(
  $$SELECT problem, message_id FROM mailroom.integrity_problems()$$,
  $$VALUES ('contents_without_state'::text, pg_temp.t_id('gone')),
           ('finished_and_live', pg_temp.t_id('both')),
           ('ledger_without_contents', (SELECT id FROM orphan)),
           ('ledger_without_contents', 900000002::bigint),
           ('queue_without_contents', 900000001::bigint),
           ('unknown_campaign', 900000003::bigint),
           ('unknown_schedule', 900000003::bigint)$$,
  'each broken invariant is found, once per mail');
SELECT is((SELECT detail FROM mailroom.integrity_problems() WHERE problem = 'finished_and_live'),
  format('queue status queued, but finished as sent (ledger row %s)',
         (SELECT id FROM mailroom.attempts WHERE message_id = pg_temp.t_id('both') AND finished_as IS NOT NULL)),
  'the detail says what is wrong');
SELECT is((SELECT detail FROM mailroom.integrity_problems() WHERE message_id = 900000002),
  '2 ledger row(s) of a mail with no contents row', 'orphaned ledger rows are counted per mail');
SELECT is((SELECT count(*)::int FROM mailroom.integrity_problems() WHERE message_id IN
           (SELECT id FROM mailroom.contents WHERE delivery_key IN ('queued', 'leased', 'review', 'sent', 'failed', 'cancelled'))),
  0, 'the healthy mails are not listed');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as)
                   VALUES (pg_temp.t_id('sent'), 1, now(), 'resolved', 'sent')$$,
  '23505', NULL, 'a second finishing row is refused by the ledger''s primary key (so the check has no case for it)');

SET LOCAL ROLE mailroom_operator;
SELECT is((SELECT count(*)::int FROM mailroom.integrity_problems()), 7, 'an operator runs it');
SELECT is((SELECT detail FROM mailroom.integrity_problems() WHERE problem = 'unknown_campaign'),
  'campaign_id 900000004 has no campaign', 'a reference the foreign key used to check is named');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.integrity_problems()$$, '42501', 'permission denied for function integrity_problems',
  'runners get 42501');
RESET ROLE;

-- The queue row's copy of the campaign (what the circuit breaker counts) must be its contents'.
UPDATE mailroom.queue SET campaign_id = 42 WHERE id = pg_temp.t_id('queued');
SELECT results_eq($$SELECT problem, detail FROM mailroom.integrity_problems() WHERE message_id = pg_temp.t_id('queued')$$,
  $$VALUES ('queue_campaign_differs'::text,
            'queue row says campaign 42, its contents campaign none (the circuit breaker counts the queue''s)'::text)$$,
  'a queue row whose campaign is not its contents'' is found');

SELECT * FROM finish();
ROLLBACK;
