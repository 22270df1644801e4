-- pgTAP: the circuit breaker's tables and their defaults.
BEGIN;
SELECT plan(9);

SELECT has_table('mailroom', 'breaker_settings', 'breaker_settings exists');
SELECT has_table('mailroom', 'breaker_counts', 'breaker_counts exists');
SELECT has_table('mailroom', 'sender_pauses', 'sender_pauses exists');
SELECT has_table('mailroom', 'breaker_trips', 'breaker_trips exists');
SELECT results_eq(
  $$SELECT scope, window_size, min_sample, bounce_warn, bounce_pause, complaint_warn, complaint_pause
    FROM mailroom.breaker_settings ORDER BY scope$$,
  $$VALUES ('campaign', 1000, 200, 0.025, 0.05, 0.0005, 0.001), ('sender', 1000, 200, 0.025, 0.05, 0.0005, 0.001)$$,
  'defaults: window 1,000, sample 200, bounces warn 2.5 % / pause 5 %, complaints 0.05 % / 0.1 %');
SELECT throws_ok($$UPDATE mailroom.breaker_settings SET bounce_pause = 0.01 WHERE scope = 'campaign'$$,
  '23514', NULL, 'a pause rate below its warning rate is refused by the table');
SELECT throws_ok($$UPDATE mailroom.breaker_settings SET min_sample = 5000 WHERE scope = 'sender'$$,
  '23514', NULL, 'a minimum sample above the window is refused by the table');

SET ROLE mailroom_operator;
SELECT throws_ok('SELECT * FROM mailroom.breaker_counts', '42501', NULL, 'operators do not read the counters directly');
SELECT throws_ok('SELECT * FROM mailroom.sender_pauses', '42501', NULL, 'operators do not read sender_pauses directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
