-- Tests for mailroom:table_attempts (the ledger as v0.4 leaves it: split_messages
-- dropped its foreign key and added the finishing row)
BEGIN;
SELECT plan(10);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT has_table('mailroom', 'attempts', 'the ledger exists');
SELECT table_owner_is('mailroom', 'attempts', 'mailroom_owner', 'owned by the owner role');
SELECT hasnt_fk('mailroom', 'attempts', 'no foreign key (its check cost every outcome): integrity_problems() checks instead');
SELECT col_is_pk('mailroom', 'attempts', ARRAY['message_id', 'finish_key'], 'keyed by message: one B-tree entry a row');
SELECT is((SELECT count(*)::int FROM pg_catalog.pg_index i WHERE i.indrelid = 'mailroom.attempts'::regclass
           AND (SELECT amname FROM pg_catalog.pg_am a JOIN pg_catalog.pg_class c ON c.relam = a.oid WHERE c.oid = i.indexrelid) = 'btree'
           AND i.indpred IS NULL),
  1, 'the primary key is the only B-tree every ledger row enters (the others are partial or BRIN)');

SELECT pg_temp.t_mail('ta-1', p_to => 'a@example.com');
-- (The values' domains are integrity_problems()' to report: see
-- attempts_value_checks_dropped.)
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome) VALUES (pg_temp.t_id('ta-1'), 1, 'sent')$$,
  '23514', NULL, 'a finished attempt has a finish time');
SELECT lives_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, finished_as, status_reason)
                  VALUES (pg_temp.t_id('ta-1'), 0, 'cancelled', now(), 'cancelled', 'suppressed')$$,
  'a decision without an attempt is a ledger row (outcome cancelled)');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, finished_as)
                   VALUES (pg_temp.t_id('ta-1'), 1, 'sent', now(), 'sent')$$,
  '23505', NULL, 'and a second finishing row for the same mail is refused');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at)
                   VALUES (pg_temp.t_id('ta-1'), 1, 'retry', now())$$,
  '23514', NULL, 'a row that does not finish its mail needs a finish_key of its own (0 is the finishing row''s)');
SELECT lives_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, finish_key)
                  SELECT pg_temp.t_id('ta-1'), g, 'retry', now(), nextval('mailroom.attempts_id_seq') FROM generate_series(1, 3) g$$,
  'with one, a mail has any number of rows besides its finishing row');

SELECT * FROM finish();
ROLLBACK;
