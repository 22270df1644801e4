-- pgTAP: schedule_upsert / schedule_set_active — changes apply to still-queued mail.
BEGIN;
SELECT plan(39);
SET LOCAL timezone = 'UTC';

SELECT has_function('mailroom', 'schedule_upsert', ARRAY['text', 'text', 'text', 'text', 'text', 'jsonb', 'boolean',
  'time without time zone', 'time without time zone', 'text', 'integer', 'text', 'text', 'text'], 'schedule_upsert exists');
SELECT is_definer('mailroom', 'schedule_upsert', ARRAY['text', 'text', 'text', 'text', 'text', 'jsonb', 'boolean',
  'time without time zone', 'time without time zone', 'text', 'integer', 'text', 'text', 'text'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'schedule_upsert', ARRAY['text', 'text', 'text', 'text', 'text', 'jsonb', 'boolean',
  'time without time zone', 'time without time zone', 'text', 'integer', 'text', 'text', 'text'],
  'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT function_privs_are('mailroom', 'schedule_set_active', ARRAY['text', 'boolean'],
  'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may (de)activate');
SELECT function_privs_are('mailroom', '_schedule_upsert', ARRAY['text', 'text', 'text', 'text', 'text', 'jsonb', 'boolean',
  'time without time zone', 'time without time zone', 'text', 'integer', 'text', 'text', 'text', 'timestamp with time zone'],
  'mailroom_app', ARRAY[]::text[], 'the pinned-clock twin is the owner''s alone');

SELECT mailroom.upsert_template('digest', 'Your week', 'Hello {{ name }}');
SELECT is(mailroom._schedule_upsert('digest:42', 'ann@example.org', '0 8 * * 1', 'Europe/Berlin', 'digest', '{"name": "Ann"}',
            p_recipient_id => '42', p_now => '2026-03-25 12:00Z'),
          mailroom._schedule_upsert('digest:42', 'ann@example.org', '0 8 * * 1', 'Europe/Berlin', 'digest', '{"name": "Ann"}',
            p_recipient_id => '42', p_now => '2026-03-25 12:00Z'),
          'upsert is keyed on the schedule key');
CREATE TEMP TABLE s AS SELECT id FROM mailroom.schedules WHERE schedule_key = 'digest:42';
-- the schedule's live mail, its key without the ":r<id>" of a replaced mail
CREATE TEMP VIEW live AS
SELECT regexp_replace(m.delivery_key, '(:r[0-9]+)+$', '') AS period_key, m.* FROM mailroom.messages m
WHERE m.status IN ('queued', 'paused', 'sending', 'review');
SELECT is((SELECT next_run_at FROM mailroom.schedules WHERE schedule_key = 'digest:42'), '2026-03-30 06:00Z'::timestamptz,
  'next_run_at: Monday 08:00 CEST (after the change to summer time)');

SELECT is(mailroom._materialize_schedules(p_now => '2026-03-30 05:56Z'), 1, 'materialized 4 minutes ahead');
SELECT results_eq($$SELECT delivery_key, run_at, status FROM mailroom.messages$$,
  format($$VALUES ('schedule:%s:2026-03-30T08:00:email', '2026-03-30 06:00Z'::timestamptz, 'queued')$$, (SELECT id FROM s)),
  'queued for 08:00 Berlin');

-- moved to another zone: the queued mail is re-timed, same local period
SELECT mailroom._schedule_upsert('digest:42', 'ann@example.org', '0 8 * * 1', 'America/New_York', 'digest', '{"name": "Ann"}',
  p_recipient_id => '42', p_now => '2026-03-30 05:57Z');
SELECT results_eq($$SELECT period_key, run_at, status, recipient_zone FROM live$$,
  format($$VALUES ('schedule:%s:2026-03-30T08:00:email', '2026-03-30 12:00Z'::timestamptz, 'queued', 'America/New_York')$$, (SELECT id FROM s)),
  'a schedule moved to New York re-times its queued mail to 08:00 EDT');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE status = 'cancelled'$$,
  $$VALUES ('cancelled', 'schedule_changed')$$, 'contents are written once: the old mail is finished, a new one replaces it');
SELECT results_eq($$SELECT next_run_at, last_run_at FROM mailroom.schedules$$,
  $$VALUES ('2026-04-06 12:00Z'::timestamptz, '2026-03-30 12:00Z'::timestamptz)$$, 'and its next run follows the new zone');
SELECT is(mailroom._materialize_schedules(p_now => '2026-03-30 11:58Z'), 0, 'no second mail for the same week');

-- content change: replaced, same period
SELECT mailroom._schedule_upsert('digest:42', 'ann@new.example.org', '0 8 * * 1', 'America/New_York', 'digest', '{"name": "Annie"}',
  p_recipient_id => '42', p_now => '2026-03-30 06:00Z');
SELECT results_eq($$SELECT to_address, template_vars, run_at FROM live$$,
  $$VALUES ('ann@new.example.org', '{"name": "Annie"}'::jsonb, '2026-03-30 12:00Z'::timestamptz)$$,
  'a new address and vars apply to the queued mail');

-- window added: queued mail waits for the opening
SELECT mailroom._schedule_upsert('digest:42', 'ann@new.example.org', '0 8 * * 1', 'America/New_York', 'digest', '{"name": "Annie"}',
  p_window_start => '09:30', p_window_end => '17:00', p_recipient_id => '42', p_now => '2026-03-30 06:00Z');
SELECT is((SELECT run_at FROM live), '2026-03-30 13:30Z'::timestamptz, 'a new send window moves it to 09:30 EDT');
SELECT is((SELECT count(*)::int FROM mailroom.messages), 3, 'a window alone moves the queue row in place: no new mail');

-- rule change: re-timed and re-keyed
SELECT mailroom._schedule_upsert('digest:42', 'ann@new.example.org', '30 7 * * 2', 'America/New_York', 'digest', '{"name": "Annie"}',
  p_recipient_id => '42', p_now => '2026-03-30 06:00Z');
SELECT results_eq($$SELECT delivery_key, run_at FROM live$$,
  format($$VALUES ('schedule:%s:2026-03-31T07:30:email', '2026-03-31 11:30Z'::timestamptz)$$, (SELECT id FROM s)),
  'a new rule re-times it to Tuesday 07:30 and re-keys it to that period');

-- deactivated: cancelled; activated again: from the next occurrence
SELECT is(mailroom._schedule_set_active('digest:42', false, '2026-03-30 07:00Z'), true, 'deactivate');
SELECT is(mailroom._schedule_set_active('digest:42', false, '2026-03-30 07:00Z'), false, 'deactivating twice does nothing');
SELECT is((SELECT count(*)::int FROM mailroom._claim_batch('w', 10, p_now => '2026-03-31 11:30Z')), 0,
  'no claim hands out a deactivated schedule''s mail');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE delivery_key LIKE '%2026-03-31T07:30%'$$,
  $$VALUES ('cancelled', 'schedule_inactive')$$, 'the claim finished it as cancelled (schedule_inactive)');
SELECT is((SELECT next_run_at FROM mailroom.schedules), NULL, 'and has no next run');
SELECT is(mailroom._materialize_schedules(p_now => '2026-04-07 11:30Z'), 0, 'an inactive schedule is not materialized');
SELECT mailroom._schedule_set_active('digest:42', true, '2026-04-02 12:00Z');
SELECT is((SELECT next_run_at FROM mailroom.schedules), '2026-04-07 11:30Z'::timestamptz, 'activated again: the next Tuesday 07:30 EDT');
-- off and on again before the occurrence: it is still mailed, once
SELECT mailroom._materialize_schedules(p_now => '2026-04-07 11:28Z');
SELECT mailroom._schedule_set_active('digest:42', false, '2026-04-07 11:29Z');
SELECT mailroom._schedule_set_active('digest:42', true, '2026-04-07 11:29Z');
SELECT mailroom._materialize_schedules(p_now => '2026-04-07 11:29Z');
SELECT results_eq($$SELECT status FROM mailroom.messages WHERE delivery_key LIKE '%2026-04-07T07:30%' ORDER BY id$$,
  $$VALUES ('queued')$$, 'off and on again before the occurrence: its mail stays queued, once');
SELECT is((SELECT count(*)::int FROM mailroom._claim_batch('w', 10, p_now => '2026-04-07 11:30Z')), 1, 'and is claimed at its time');

-- changed while off, then switched on before the occurrence: the queued mail says the new thing
SELECT mailroom._schedule_upsert('d:43', 'old@example.org', '0 8 * * *', 'UTC', 'digest', p_now => '2026-05-01 07:00Z');
SELECT mailroom._materialize_schedules(p_now => '2026-05-01 07:58Z');
SELECT mailroom._schedule_set_active('d:43', false, '2026-05-01 07:58:10Z');
SELECT mailroom._schedule_upsert('d:43', 'new@example.org', '0 8 * * *', 'UTC', 'digest', p_active => false, p_now => '2026-05-01 07:58:20Z');
SELECT mailroom._schedule_set_active('d:43', true, '2026-05-01 07:58:30Z');
SELECT results_eq($$SELECT l.to_address, l.run_at FROM live l JOIN mailroom.schedules s ON s.id = l.schedule_id WHERE s.schedule_key = 'd:43'$$,
  $$VALUES ('new@example.org', '2026-05-01 08:00Z'::timestamptz)$$, 'one live mail for the period, with the address changed while the schedule was off');

-- bad input: nothing written
SET ROLE mailroom_app;
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * * 1', 'Europe/Berlinn', 'digest')$$,
  '22023', 'mailroom: zone: "Europe/Berlinn" is not a known IANA time zone', 'unknown zone');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * 1', 'Europe/Berlin', 'digest')$$,
  '22023', 'mailroom: rule: expected 5 fields (minute hour day-of-month month day-of-week), got 4 in "0 8 * 1"', 'malformed rule');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 25 * * 1', 'Europe/Berlin', 'digest')$$,
  '22023', 'mailroom: rule: hour: 25 is out of range 0-23', 'out-of-range field');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * * 1', 'Europe/Berlin', 'digest', p_window_start => '08:00', p_window_end => '08:00')$$,
  '22023', 'mailroom: window_end: must differ from window_start (08:00:00), an empty window never opens', 'window end equal to start');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * * 1', 'Europe/Berlin', 'nope')$$,
  '22023', 'mailroom: template: no template named "nope"', 'unknown template');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@', '0 8 * * 1', 'Europe/Berlin', 'digest')$$,
  '22023', 'mailroom: to: "a@" has an invalid domain', 'bad address');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * * 1', 'Europe/Berlin', 'digest', p_channel => 'E Mail')$$,
  '22023', 'mailroom: channel: "E Mail" is not a channel name (a-z, 0-9, _ and -, at most 32)', 'bad channel');
SELECT throws_ok($$SELECT mailroom.schedule_set_active('nope', false)$$,
  '22023', 'mailroom: key: no schedule named "nope"', 'unknown schedule');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * * 1', 'Europe/Berlin', 'digest', p_recipient_id => E'42\r\nX')$$,
  '22023', 'mailroom: recipient_id: must be NULL or 1 to 200 characters without control characters', 'recipient_id with CR/LF');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * * 1', 'Europe/Berlin', 'digest', p_recipient_id => repeat('x', 201))$$,
  '22023', 'mailroom: recipient_id: must be NULL or 1 to 200 characters without control characters', 'recipient_id over 200 characters');
SELECT throws_ok($$SELECT mailroom.schedule_upsert('d:1', 'a@example.org', '0 8 * * 1', 'Europe/Berlin', 'digest', p_recipient_id => '')$$,
  '22023', 'mailroom: recipient_id: must be NULL or 1 to 200 characters without control characters', 'empty recipient_id');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.schedules), 2, 'no schedule was written by the bad calls');

SELECT * FROM finish();
ROLLBACK;
