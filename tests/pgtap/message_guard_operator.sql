-- Tests for mailroom:message_guard_operator: the v0.3 trigger is gone; mail an
-- operator retries (retry, resolve_review 'retry') respects campaign pause and
-- cancel, inactive schedules and send windows through retry's own decisions
-- and claim_batch's gate.
BEGIN;
SELECT plan(7);
SET LOCAL client_min_messages = warning;

SELECT is((SELECT count(*)::int FROM pg_trigger WHERE tgname = 'messages_guard_operator_requeue'), 0,
  'the v0.3 operator requeue trigger is gone');

SELECT mailroom.upsert_template('guard', 'S', 'B');
INSERT INTO mailroom.campaigns (id, name, template_key, send_at, time_zone, window_start, window_end) OVERRIDING SYSTEM VALUE
VALUES (101, 'active', 'guard', '2030-01-01Z', 'UTC', NULL, NULL),
       (102, 'paused', 'guard', '2030-01-01Z', 'UTC', NULL, NULL),
       (103, 'cancelled', 'guard', '2030-01-01Z', 'UTC', NULL, NULL),
       (104, 'windowed', 'guard', '2030-01-01Z', 'UTC', '09:00', '10:00');
SELECT mailroom.pause_campaign(102);
SELECT mailroom.cancel_campaign(103);
INSERT INTO mailroom.schedules (id, schedule_key, to_address, time_zone, rule, template_key, active) OVERRIDING SYSTEM VALUE
VALUES (201, 'gone', 'sched@example.com', 'UTC', '0 9 * * *', 'guard', false);
-- failed mail is finished (contents + a finishing ledger row); review mail is live (a queue row)
CREATE TEMP TABLE ids AS
WITH content AS (
  INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id, schedule_id, recipient_id)
  VALUES ('c-active', 'a@example.com', 'guard', 101, NULL, 'a'),
         ('c-paused', 'p@example.com', 'guard', 102, NULL, 'p'),
         ('c-paused-review', 'pr@example.com', 'guard', 102, NULL, 'pr'),
         ('c-cancelled', 'c@example.com', 'guard', 103, NULL, 'c'),
         ('c-window', 'w@example.com', 'guard', 104, NULL, 'w'),
         ('s-inactive', 'sched@example.com', 'guard', NULL, 201, NULL),
         ('plain', 'x@example.com', 'guard', NULL, NULL, NULL)
  RETURNING id, delivery_key, campaign_id
),
live AS (
  INSERT INTO mailroom.queue (id, status, sender, campaign_id, attempts, max_attempts, on_ambiguous)
  SELECT id, 'review', 'default', campaign_id, 1, 5, 'review' FROM content WHERE delivery_key IN ('c-paused-review', 'c-cancelled')
),
finished AS (
  INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
  SELECT id, 5, '2030-01-01Z', 'failed', 'failed', 'max_attempts' FROM content
  WHERE delivery_key NOT IN ('c-paused-review', 'c-cancelled')
)
SELECT delivery_key AS k, id FROM content;

SELECT results_eq(
  $$SELECT i.k, r.status FROM mailroom.retry(ARRAY(SELECT id FROM ids WHERE k <> 'c-paused-review')) r
    JOIN ids i USING (id) ORDER BY i.k$$,
  $$VALUES ('c-active'::text, 'queued'::text), ('c-cancelled', 'review'), ('c-paused', 'paused'),
           ('c-window', 'queued'), ('plain', 'queued'), ('s-inactive', 'failed')$$,
  'retry reports the status as written: held for a paused campaign, not retried for a cancelled campaign or inactive schedule');
SELECT results_eq(
  $$SELECT i.k, q.status_reason, f.finished_as IS NULL FROM ids i JOIN mailroom.queue q USING (id)
    LEFT JOIN mailroom.attempts f ON f.message_id = i.id AND f.finished_as IS NOT NULL
    WHERE i.k IN ('c-window', 'plain') ORDER BY i.k$$,
  $$VALUES ('c-window'::text, 'operator retry'::text, true), ('plain', 'operator retry', true)$$,
  'retried failed mail is live again: a queue row, no finishing row');
SELECT is(mailroom.resolve_review((SELECT id FROM ids WHERE k = 'c-paused-review'), 'retry'), 'paused',
  'resolve_review retry of paused-campaign mail: held as paused');
SELECT is((SELECT count(*)::int FROM mailroom._claim_batch('w', 10, '1 minute', NULL, '2030-01-02 08:00Z')
           WHERE delivery_key IN ('c-active', 'plain')), 2,
  'the active campaign''s and the plain mail are claimable');
SELECT is((SELECT run_at FROM mailroom.queue WHERE id = (SELECT id FROM ids WHERE k = 'c-window')), '2030-01-02 09:00Z'::timestamptz,
  'the windowed campaign''s mail is not claimed outside its window: the gate moved it to the next opening');
SELECT is((SELECT count(*)::int FROM mailroom.queue WHERE id IN (SELECT id FROM ids WHERE k IN ('c-paused', 'c-paused-review'))
           AND status = 'paused'), 2, 'the paused campaign''s mail stays parked');

SELECT * FROM finish();
ROLLBACK;
