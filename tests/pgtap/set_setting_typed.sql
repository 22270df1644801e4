-- Tests for mailroom:set_setting_typed
BEGIN;
SELECT plan(17);

SELECT has_function('mailroom', '_check_setting', ARRAY['text', 'text'], '_check_setting(text, text) exists');
SELECT function_privs_are('mailroom', 'set_setting', ARRAY['text', 'text'], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators still may change settings');
SELECT function_privs_are('mailroom', '_check_setting', ARRAY['text', 'text'], 'mailroom_operator', ARRAY[]::text[],
  'the check is internal');

-- Every setting deployed has a type and its current value passes: a setting
-- added without a line in _check_setting fails here.
SELECT lives_ok($$SELECT mailroom._check_setting(key, value) FROM mailroom.settings$$,
  'every deployed setting is typed and its value is valid');
SELECT throws_ok($$SELECT mailroom._check_setting('no_such_knob', '1')$$, '22023',
  'mailroom: no_such_knob: no type is known for this setting', 'an untyped setting is refused, not stored blindly');

-- Good values are stored as given.
SELECT lives_ok($$SELECT mailroom.set_setting('retry_backoff_base', '100 milliseconds'),
                         mailroom.set_setting('max_body_bytes', '2048'),
                         mailroom.set_setting('attempts_retention', '7 years')$$, 'valid values are accepted');
SELECT results_eq($$SELECT value FROM mailroom.settings
                    WHERE key IN ('retry_backoff_base', 'max_body_bytes', 'attempts_retention') ORDER BY key$$,
  $$VALUES ('7 years'::text), ('2048'), ('100 milliseconds')$$, 'and stored as given');

CREATE TEMP TABLE before AS SELECT * FROM mailroom.settings;
SELECT throws_ok($$SELECT mailroom.set_setting('max_body_bytes', 'lots')$$, '22023',
  'mailroom: max_body_bytes: must be a whole number, got "lots"', 'a size must be a number');
SELECT throws_ok($$SELECT mailroom.set_setting('max_body_bytes', '0')$$, '22023',
  'mailroom: max_body_bytes: must be between 1 and 1073741824, got 0', 'a size must be positive');
SELECT throws_ok($$SELECT mailroom.set_setting('prune_batch_size', '99999999999999999999')$$, '22023',
  'mailroom: prune_batch_size: must be a whole number, got "99999999999999999999"', 'a number beyond bigint');
SELECT throws_ok($$SELECT mailroom.set_setting('prune_max_batches', '10001')$$, '22023',
  'mailroom: prune_max_batches: must be between 1 and 10000, got 10001', 'a count over its bound');
SELECT throws_ok($$SELECT mailroom.set_setting('retry_backoff_base', 'soon')$$, '22023',
  'mailroom: retry_backoff_base: must be an interval such as ''30 seconds'', got "soon"', 'an interval must parse');
SELECT throws_ok($$SELECT mailroom.set_setting('retry_backoff_max', '-1 second')$$, '22023',
  'mailroom: retry_backoff_max: must be between 1 millisecond and 30 days, got -1 second', 'an interval must be positive');
SELECT throws_ok($$SELECT mailroom.set_setting('attempts_retention', '1000000 years')$$, '22023',
  'mailroom: attempts_retention: must be between 1 day and 100 years, got 1000000 years', 'an interval is bounded');
SELECT throws_ok($$SELECT mailroom.set_setting('schedule_lookahead', '1 day')$$, '22023',
  'mailroom: schedule_lookahead: must be between 0 and 1 hour, got 1 day', 'the lookahead is at most an hour');
SELECT throws_ok($$SELECT mailroom.set_setting('cache_max_entries', NULL)$$, '22023',
  'mailroom: cache_max_entries: must not be NULL', 'NULL is refused');
SELECT results_eq($$SELECT key, value FROM mailroom.settings ORDER BY key$$,
  $$SELECT key, value FROM before ORDER BY key$$, 'refused values wrote nothing');

SELECT * FROM finish();
ROLLBACK;
