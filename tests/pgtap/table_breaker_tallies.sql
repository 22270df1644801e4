-- pgTAP: the circuit breaker's counts: delivered mail per backend, bad events
-- at their position in the delivered count.
BEGIN;
SELECT plan(7);

SELECT has_table('mailroom', 'breaker_delivered', 'breaker_delivered exists');
SELECT has_table('mailroom', 'breaker_bad_events', 'breaker_bad_events exists');
SELECT col_is_pk('mailroom', 'breaker_delivered', ARRAY['scope', 'key', 'backend_pid'],
  'one delivered row per campaign or sender and backend');
SELECT has_index('mailroom', 'breaker_bad_events', 'breaker_bad_events_window_idx', ARRAY['scope', 'key', 'at_delivered'],
  'bad events are found by their position in the window');
SELECT throws_ok($$INSERT INTO mailroom.breaker_bad_events (scope, key, at_delivered, bounced, complained)
                   VALUES ('sender', 's', 1, 0, 0)$$,
  '23514', NULL, 'a bad event counts something');

SET ROLE mailroom_operator;
SELECT throws_ok('SELECT * FROM mailroom.breaker_delivered', '42501', NULL, 'operators do not read the delivered rows');
SELECT throws_ok('SELECT * FROM mailroom.breaker_bad_events', '42501', NULL, 'nor the bad events');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
