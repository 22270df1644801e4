-- Tests for mailroom:prune_feedback (and the retention settings set_setting_typed checks)
BEGIN;
SELECT plan(22);
SET LOCAL client_min_messages = warning;

SELECT has_function('mailroom', 'prune_feedback', ARRAY['integer'], 'prune_feedback exists');
SELECT is_definer('mailroom', 'prune_feedback', ARRAY['integer'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'prune_feedback', ARRAY['integer'],
  'mailroom_operator', ARRAY['EXECUTE'], 'operators may prune feedback');
SELECT function_privs_are('mailroom', '_prune_feedback', ARRAY['integer', 'timestamp with time zone'],
  'mailroom_operator', ARRAY[]::text[], 'the twin that pins the clock is the owner''s only');
SELECT has_index('mailroom', 'feedback_events', 'feedback_events_received_at_idx', ARRAY['received_at'],
  'events are indexed by receipt time');
SELECT results_eq($$SELECT schedule, command FROM cron.job WHERE jobname = 'mailroom-prune-feedback'$$,
  $$VALUES ('47 * * * *'::text, 'SELECT * FROM mailroom.prune_feedback()'::text)$$,
  'one pg_cron job runs prune_feedback hourly');

-- The defaults: raw inbound mail is kept for less time than the ledger.
SELECT results_eq($$SELECT key, value FROM mailroom.settings WHERE key IN ('feedback_retention', 'inbound_unparsed_retention') ORDER BY key$$,
  $$VALUES ('feedback_retention'::text, '90 days'::text), ('inbound_unparsed_retention', '14 days')$$, 'the default ages');
SELECT ok((SELECT value::interval FROM mailroom.settings WHERE key = 'inbound_unparsed_retention')
          < (SELECT value::interval FROM mailroom.settings WHERE key = 'attempts_retention'),
  'unparsed inbound mail goes sooner than the ledger');
SELECT throws_ok($$SELECT mailroom.set_setting('feedback_retention', '6 days')$$, '22023',
  'mailroom: feedback_retention: must be between 7 days and 100 years, got 6 days',
  'an event is kept at least as long as its reporter retries it');
SELECT throws_ok($$SELECT mailroom.set_setting('inbound_unparsed_retention', 'soon')$$, '22023',
  'mailroom: inbound_unparsed_retention: must be an interval such as ''30 seconds'', got "soon"', 'a retention must be an interval');
SELECT lives_ok($$SELECT mailroom.set_setting('inbound_unparsed_retention', '1 day')$$, 'one day is allowed');
UPDATE mailroom.settings SET value = '14 days' WHERE key = 'inbound_unparsed_retention';

-- 5 old events and 1 recent one; 3 old unparsed mails and 1 recent one
-- (cut-offs at 2030-04-15: events before 2030-01-15, unparsed before 2030-04-01).
UPDATE mailroom.settings SET value = '2' WHERE key = 'prune_batch_size';
UPDATE mailroom.settings SET value = '2' WHERE key = 'prune_max_batches';
INSERT INTO mailroom.feedback_events (event_key, kind, address, source, received_at)
SELECT 'test:' || g, 'delayed', 'u' || g || '@example.com', 'app', '2030-01-01Z'::timestamptz + g * interval '1 minute'
FROM generate_series(1, 5) g;
INSERT INTO mailroom.feedback_events (event_key, kind, address, source, received_at)
VALUES ('test:new', 'delayed', 'new@example.com', 'app', '2030-01-20Z');
INSERT INTO mailroom.inbound_unparsed (received_at, reason, size, raw)
SELECT t, 'no_report test', 2, '\x6869'::bytea
FROM unnest(ARRAY['2030-03-01Z', '2030-03-02Z', '2030-03-03Z', '2030-04-10Z']::timestamptz[]) t;

CREATE TEMP TABLE snap AS
SELECT (SELECT count(*) FROM mailroom.feedback_events) AS events, (SELECT count(*) FROM mailroom.inbound_unparsed) AS unparsed;
SELECT throws_ok($$SELECT * FROM mailroom.prune_feedback(0)$$, '22023',
  'mailroom: batch: must be between 1 and 1000000, got 0', 'a batch of 0 is refused');
SELECT throws_ok($$SELECT * FROM mailroom._prune_feedback(NULL, NULL)$$, '22023', 'mailroom: now: must not be NULL', 'NULL now');
UPDATE mailroom.settings SET value = '1 day' WHERE key = 'feedback_retention';
SELECT throws_ok($$SELECT * FROM mailroom._prune_feedback(NULL, '2030-04-15Z')$$, '22023',
  'mailroom: feedback_retention: must be between 7 days and 100 years, got 1 day', 'a setting written around set_setting is refused');
UPDATE mailroom.settings SET value = '90 days' WHERE key = 'feedback_retention';
SELECT results_eq($$SELECT (SELECT count(*) FROM mailroom.feedback_events), (SELECT count(*) FROM mailroom.inbound_unparsed)$$,
  $$SELECT events, unparsed FROM snap$$, 'bad input deleted nothing');

SELECT results_eq($$SELECT * FROM mailroom._prune_feedback(NULL, '2030-04-15Z')$$,
  $$VALUES (4::bigint, 3::bigint, 4, true)$$,
  'one call retires at most prune_max_batches x prune_batch_size rows per table, and says there is more');
SELECT results_eq($$SELECT * FROM mailroom._prune_feedback(NULL, '2030-04-15Z')$$,
  $$VALUES (1::bigint, 0::bigint, 2, false)$$, 'the next call takes the rest');
SELECT results_eq($$SELECT event_key FROM mailroom.feedback_events WHERE event_key LIKE 'test:%'$$,
  $$VALUES ('test:new'::text)$$, 'the event younger than feedback_retention stays');
SELECT results_eq($$SELECT received_at FROM mailroom.inbound_unparsed WHERE reason = 'no_report test'$$,
  $$VALUES ('2030-04-10Z'::timestamptz)$$, 'the unparsed mail younger than inbound_unparsed_retention stays');
SELECT results_eq($$SELECT feedback_events, inbound_unparsed FROM mailroom._prune_feedback(5, '2030-04-25Z')$$,
  $$VALUES (1::bigint, 1::bigint)$$, 'later, they go too (an explicit batch overrides the setting)');

SET LOCAL ROLE mailroom_operator;
SELECT results_eq($$SELECT feedback_events, inbound_unparsed, more FROM mailroom.prune_feedback()$$,
  $$VALUES (0::bigint, 0::bigint, false)$$, 'operators prune feedback by the database clock');
SELECT throws_ok($$SELECT * FROM mailroom._prune_feedback(NULL, '2100-01-01Z')$$, '42501',
  'permission denied for function _prune_feedback', 'operators cannot move its clock');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
