-- Tests for mailroom:attempts_value_checks_dropped: the ledger checks its
-- invariants only; integrity_problems() reports values no function writes.
BEGIN;
SELECT plan(6);
SET LOCAL client_min_messages = warning;
\ir include/core_state.psql

SELECT is((SELECT array_agg(c.conname::text ORDER BY c.conname) FROM pg_catalog.pg_constraint c
           WHERE c.conrelid = 'mailroom.attempts'::regclass AND c.contype = 'c'),
  ARRAY['attempts_finish_key_valid', 'attempts_finished_with_outcome'], 'two checks, both invariants');

SELECT pg_temp.t_mail('vc-1', p_to => 'a@example.com');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finish_key)
                   VALUES (pg_temp.t_id('vc-1'), 1, 'retry', nextval('mailroom.attempts_id_seq'))$$,
  '23514', NULL, 'an attempt with an outcome has a finish time');
SELECT throws_ok($$INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, finished_as, finish_key)
                   VALUES (pg_temp.t_id('vc-1'), 1, 'sent', now(), 'sent', nextval('mailroom.attempts_id_seq'))$$,
  '23514', NULL, 'a finishing row has finish_key 0');

-- What no function writes goes in, and integrity_problems() names it.
INSERT INTO mailroom.attempts (message_id, attempt, outcome, finished_at, smtp_code, finish_key)
VALUES (pg_temp.t_id('vc-1'), 1, 'lost', now(), 250, nextval('mailroom.attempts_id_seq')),
       (pg_temp.t_id('vc-1'), 2, 'retry', now(), 999, nextval('mailroom.attempts_id_seq')),
       (pg_temp.t_id('vc-1'), 3, 'retry', now(), 451, nextval('mailroom.attempts_id_seq'));
SELECT is((SELECT count(*)::int FROM mailroom.integrity_problems() WHERE problem = 'ledger_value_unknown'), 2,
  'an unknown outcome and an SMTP code past 599 are reported, the well-formed retry is not');
SELECT ok((SELECT bool_and(detail LIKE 'ledger row % not what the functions write') FROM mailroom.integrity_problems()
           WHERE problem = 'ledger_value_unknown'), 'the detail names the ledger row and shows its values');
UPDATE mailroom.queue SET status = 'sent' WHERE id = pg_temp.t_id('vc-1');
SELECT is((SELECT detail FROM mailroom.integrity_problems() WHERE problem = 'queue_value_unknown'),
  'status sent, priority 0, attempts 0 of 5, on_ambiguous retry: not what the functions write',
  'a queue row with a status no function writes is reported');

SELECT * FROM finish();
ROLLBACK;
