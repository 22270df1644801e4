-- Revert mailroom:attempts_value_checks_dropped from pg

BEGIN;

ALTER TABLE mailroom.attempts
  ADD CONSTRAINT attempts_outcome_valid
    CHECK (outcome IN ('sent', 'retry', 'failed', 'ambiguous', 'expired', 'stale', 'released', 'cancelled', 'resolved', 'bounced')),
  ADD CONSTRAINT attempts_reported_valid CHECK (reported IN ('sent', 'retry', 'failed', 'ambiguous')),
  ADD CONSTRAINT attempts_finished_as_valid CHECK (finished_as IN ('sent', 'failed', 'cancelled')),
  ADD CONSTRAINT attempts_finished_has_outcome CHECK (finished_as IS NULL OR outcome IS NOT NULL),
  ADD CONSTRAINT attempts_smtp_code_range CHECK (smtp_code BETWEEN 200 AND 599),
  ADD CONSTRAINT attempts_smtp_enhanced_format CHECK (smtp_enhanced ~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'),
  ADD CONSTRAINT attempts_smtp_text_bounded CHECK (length(smtp_text) <= 1000),
  ADD CONSTRAINT attempts_provider_id_bounded CHECK (length(provider_id) <= 255);

COMMIT;
