-- pgTAP: mailroom.schedules.
BEGIN;
SELECT plan(8);

SELECT has_table('mailroom', 'schedules', 'schedules exists');
SELECT columns_are('mailroom', 'schedules', ARRAY['id', 'schedule_key', 'recipient_id', 'to_address', 'time_zone', 'rule',
  'template_key', 'vars', 'channel', 'priority', 'sender', 'window_start', 'window_end', 'active', 'next_run_at',
  'last_run_at', 'created_at', 'updated_at', 'stream'], 'schedules has the expected columns');
SELECT table_owner_is('mailroom', 'schedules', 'mailroom_owner', 'owned by mailroom_owner');
SELECT table_privs_are('mailroom', 'schedules', 'mailroom_app', ARRAY[]::text[], 'mailroom_app has no direct access');
SELECT has_index('mailroom', 'schedules', 'schedules_due_idx', 'a partial index on next_run_at of active schedules');
SELECT col_isnt_fk('mailroom', 'contents', 'schedule_id', 'contents.schedule_id carries no foreign key; integrity_problems() checks it');
SELECT results_eq($$SELECT key, value FROM mailroom.settings WHERE key LIKE 'schedule\_%' ORDER BY key$$,
  $$VALUES ('schedule_batch', '5000'), ('schedule_lookahead', '5 minutes'), ('schedule_max_lateness', '1 day')$$,
  'the schedule settings and their defaults');
INSERT INTO mailroom.templates (key, subject, body_text) VALUES ('t', 's', 'b');
SELECT throws_ok($$INSERT INTO mailroom.schedules (schedule_key, to_address, time_zone, rule, template_key, active, next_run_at)
                   VALUES ('k', 'a@example.org', 'UTC', '0 8 * * 1', 't', false, now())$$,
  '23514', NULL, 'an inactive schedule has no next_run_at');

SELECT * FROM finish();
ROLLBACK;
