-- pgTAP: mailroom.senders and set_sender_limits
BEGIN;
SELECT plan(12);

SELECT has_table('mailroom', 'senders', 'mailroom.senders exists');
SELECT col_is_pk('mailroom', 'senders', 'name', 'name is the primary key');
SELECT table_privs_are('mailroom', 'senders', 'mailroom_runner', ARRAY[]::text[], 'runners have no table privileges');
SELECT has_function('mailroom', 'set_sender_limits', ARRAY['text', 'integer', 'integer'], 'set_sender_limits exists');
SELECT is_definer('mailroom', 'set_sender_limits', ARRAY['text', 'integer', 'integer'], 'set_sender_limits is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'set_sender_limits', ARRAY['text', 'integer', 'integer'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may set send rates');

DELETE FROM mailroom.senders;
SELECT mailroom.set_sender_limits('mailgun', 50, 2000);
SELECT mailroom.set_sender_limits('ses', 14);
SELECT mailroom.set_sender_limits('mailgun', 40, NULL);
SELECT results_eq($$SELECT name, max_per_second, max_per_minute FROM mailroom.senders ORDER BY name$$,
  $$VALUES ('mailgun'::text, 40, NULL::integer), ('ses', 14, NULL)$$, 'limits are set and replaced');
SELECT mailroom.set_sender_limits('ses', NULL, NULL);
SELECT is((SELECT count(*) FROM mailroom.senders WHERE name = 'ses'), 0::bigint, 'NULL, NULL removes the sender: unlimited');

SELECT throws_ok($$SELECT mailroom.set_sender_limits('', 5)$$, '22023', 'mailroom: sender: must be 1 to 200 characters', 'an empty sender is refused');
SELECT throws_ok($$SELECT mailroom.set_sender_limits('x', 0)$$, '22023', 'mailroom: max_per_second: must be between 1 and 1000000 or NULL, got 0', 'a zero rate is refused');
SELECT throws_ok($$SELECT mailroom.set_sender_limits('x', 5, -1)$$, '22023', 'mailroom: max_per_minute: must be between 1 and 60000000 or NULL, got -1', 'a negative rate is refused');
SELECT results_eq($$SELECT name, max_per_second FROM mailroom.senders ORDER BY name$$,
  $$VALUES ('mailgun'::text, 40)$$, 'refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
