-- Tests for mailroom:view_settings_and_limits
BEGIN;
SELECT plan(10);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.senders, mailroom.domain_limits;

SELECT view_owner_is('mailroom', 'current_settings', 'mailroom_owner', 'current_settings: owned by mailroom_owner');
SELECT view_owner_is('mailroom', 'send_limits', 'mailroom_owner', 'send_limits: owned by mailroom_owner');

SELECT mailroom.set_setting('attempts_retention', '90 days');
SELECT mailroom.set_sender_limits('newsletter', 50, NULL);
SELECT mailroom.set_domain_limits('gmail.com', 5, 200);

CREATE ROLE t_settings_operator LOGIN IN ROLE mailroom_operator;
SET LOCAL ROLE t_settings_operator;
SELECT throws_ok($$SELECT * FROM mailroom.settings$$, '42501', NULL, 'operators still cannot read the settings table');
SELECT is((SELECT value FROM mailroom.current_settings WHERE key = 'attempts_retention'), '90 days',
  'an operator reads back the setting it set');
SELECT ok((SELECT count(*) FILTER (WHERE description <> '') = count(*) AND count(*) >= 7 FROM mailroom.current_settings),
  'every setting is listed with its meaning');
SELECT results_eq($$SELECT kind, name, max_per_second, max_per_minute FROM mailroom.send_limits ORDER BY kind, name$$,
  $$VALUES ('domain'::text, 'gmail.com'::text, 5, 200), ('sender', 'newsletter', 50, NULL)$$,
  'an operator reads back the sender and domain limits it set');
RESET ROLE;

SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.current_settings$$, '42501', NULL, 'applications cannot read settings');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.send_limits$$, '42501', NULL, 'runners cannot read send limits');
RESET ROLE;
SELECT table_privs_are('mailroom', 'current_settings', 'mailroom_operator', ARRAY['SELECT'], 'operators: SELECT only');
SELECT table_privs_are('mailroom', 'send_limits', 'public', ARRAY[]::text[], 'PUBLIC: nothing');

SELECT * FROM finish();
ROLLBACK;
