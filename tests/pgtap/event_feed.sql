-- Tests for mailroom:event_feed (the behaviour under load and concurrency: tests/test_event_feed.py)
BEGIN;
SELECT plan(12);
SET LOCAL client_min_messages = warning;

SELECT has_table('mailroom', 'events', 'the feed is a table');
SELECT col_is_pk('mailroom', 'events', ARRAY['xid', 'id'], 'ordered and keyed by (xid, id)');
SELECT trigger_is('mailroom', 'attempts', 'attempts_events', 'mailroom', '_events_from_ledger', 'the ledger feeds it');
SELECT trigger_is('mailroom', 'feedback_events', 'feedback_events_events', 'mailroom', '_events_from_feedback', 'complaints feed it');
SELECT trigger_is('mailroom', 'suppressions', 'suppressions_events', 'mailroom', '_events_from_suppressions', 'suppressions feed it');
SELECT results_eq($$SELECT schedule, command FROM cron.job WHERE jobname = 'mailroom-prune-events'$$,
  $$VALUES ('37 * * * *'::text, 'SELECT * FROM mailroom.prune_events()'::text)$$,
  'one pg_cron job runs prune_events hourly');
SELECT is((SELECT value FROM mailroom.settings WHERE key = 'event_retention'), '30 days', 'kept 30 days by default');
SELECT throws_ok($$SELECT mailroom.set_setting('event_retention', '23 hours')$$, '22023',
  'mailroom: event_retention: must be between 1 day and 100 years, got 23 hours', 'at least a day');

-- Within one transaction: nothing of its own is handed out before it commits.
SELECT mailroom.suppress('pgtap-feed@example.com', 'manual', 'pgtap');
SELECT is((SELECT count(*)::int FROM mailroom.events_since(NULL, 100) WHERE address = 'pgtap-feed@example.com'), 0,
  'an uncommitted event is not handed out, not even to its own transaction');
SELECT is((SELECT count(*)::int FROM mailroom.events WHERE address = 'pgtap-feed@example.com' AND kind = 'suppressed'), 1,
  'but it is written');
SELECT throws_ok($$SELECT * FROM mailroom.events_since('1-x')$$, '22023', NULL, 'a malformed cursor is refused');
SELECT ok(mailroom.events_head() ~ '^[0-9]+-0$', 'events_head is a cursor');

SELECT * FROM finish();
ROLLBACK;
