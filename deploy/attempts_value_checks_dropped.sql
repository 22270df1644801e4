-- Deploy mailroom:attempts_value_checks_dropped to pg
-- requires: ledger_bounced
-- requires: split_messages

-- The ledger keeps the checks that state its invariants (a row has an
-- outcome exactly when it has a finish time; finish_key is 0 exactly on the
-- finishing row) and drops the eight that bound its values: every sent
-- mail's ledger row paid each of them, about 5 % of what claiming and
-- reporting a mail costs the database (bench/RESULTS.md). The values are
-- the writers' constants (outcome, reported, finished_as) or mark_outcomes'
-- input, which it checks and names the element of (SMTP code, enhanced
-- status, text, provider id; the text and the id cut to length);
-- mailroom.integrity_problems() reports a row outside the old bounds
-- (ledger_value_unknown).

BEGIN;

ALTER TABLE mailroom.attempts
  DROP CONSTRAINT attempts_outcome_valid,
  DROP CONSTRAINT attempts_reported_valid,
  DROP CONSTRAINT attempts_finished_as_valid,
  DROP CONSTRAINT attempts_finished_has_outcome,
  DROP CONSTRAINT attempts_smtp_code_range,
  DROP CONSTRAINT attempts_smtp_enhanced_format,
  DROP CONSTRAINT attempts_smtp_text_bounded,
  DROP CONSTRAINT attempts_provider_id_bounded;

COMMIT;
