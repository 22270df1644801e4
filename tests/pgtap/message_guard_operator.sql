-- Tests for mailroom:message_guard_operator
BEGIN;
SELECT plan(6);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.messages CASCADE;
TRUNCATE mailroom.suppressions;

SELECT has_trigger('mailroom', 'messages', 'messages_guard_operator_requeue', 'the operator requeue guard exists');

SELECT mailroom.upsert_template('guard', 'S', 'B');
INSERT INTO mailroom.campaigns (id, name, template_key, send_at, time_zone, window_start, window_end) OVERRIDING SYSTEM VALUE
VALUES (101, 'active', 'guard', '2030-01-01Z', 'UTC', NULL, NULL),
       (102, 'paused', 'guard', '2030-01-01Z', 'UTC', NULL, NULL),
       (103, 'cancelled', 'guard', '2030-01-01Z', 'UTC', NULL, NULL),
       (104, 'windowed', 'guard', '2030-01-01Z', 'UTC', '09:00', '10:00');
SELECT mailroom.pause_campaign(102, '2030-01-01Z');
SELECT mailroom.cancel_campaign(103, '2030-01-01Z');
INSERT INTO mailroom.schedules (id, schedule_key, to_address, time_zone, rule, template_key, active) OVERRIDING SYSTEM VALUE
VALUES (201, 'gone', 'sched@example.com', 'UTC', '0 9 * * *', 'guard', false);
INSERT INTO mailroom.messages (delivery_key, status, to_address, template_key, campaign_id, schedule_id, recipient_id, attempts)
VALUES ('c-active', 'failed', 'a@example.com', 'guard', 101, NULL, 'a', 5),
       ('c-paused', 'failed', 'p@example.com', 'guard', 102, NULL, 'p', 5),
       ('c-paused-review', 'review', 'pr@example.com', 'guard', 102, NULL, 'pr', 1),
       ('c-cancelled', 'review', 'c@example.com', 'guard', 103, NULL, 'c', 1),
       ('c-window', 'failed', 'w@example.com', 'guard', 104, NULL, 'w', 5),
       ('s-inactive', 'failed', 'sched@example.com', 'guard', NULL, 201, NULL, 5),
       ('plain', 'failed', 'x@example.com', 'guard', NULL, NULL, NULL, 5);
CREATE TEMP TABLE ids AS SELECT delivery_key AS k, id FROM mailroom.messages;

SELECT results_eq(
  $$SELECT i.k, r.status FROM mailroom.retry(ARRAY(SELECT id FROM ids WHERE k <> 'c-paused-review'), '2030-01-01 12:00Z') r
    JOIN ids i USING (id) ORDER BY i.k$$,
  $$VALUES ('c-active'::text, 'queued'::text), ('c-cancelled', 'cancelled'), ('c-paused', 'paused'),
           ('c-window', 'queued'), ('plain', 'queued'), ('s-inactive', 'cancelled')$$,
  'retry reports the status as written: held for a paused campaign, cancelled for a cancelled campaign or inactive schedule');
SELECT results_eq(
  $$SELECT k, status_reason, run_at FROM mailroom.messages JOIN ids USING (id) WHERE k IN ('c-window', 'plain') ORDER BY k$$,
  $$VALUES ('c-window'::text, 'operator retry'::text, '2030-01-02 09:00Z'::timestamptz),
           ('plain', 'operator retry', '2030-01-01 12:00Z')$$,
  'a send window moves run_at to its next opening; other mail is due now');
SELECT results_eq(
  $$SELECT k, status_reason FROM mailroom.messages JOIN ids USING (id) WHERE k IN ('c-cancelled', 's-inactive') ORDER BY k$$,
  $$VALUES ('c-cancelled'::text, 'campaign_cancelled'::text), ('s-inactive', 'schedule_inactive')$$,
  'the guard says why it cancelled');
SELECT is(mailroom.resolve_review((SELECT id FROM ids WHERE k = 'c-paused-review'), 'retry', '2030-01-01 12:00Z'), 'paused',
  'resolve_review retry of paused-campaign mail: held as paused');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('w', 10, '1 minute', NULL, '2030-01-02 08:00Z')), 2,
  'only the active campaign''s and the plain mail are claimable');

SELECT * FROM finish();
ROLLBACK;
