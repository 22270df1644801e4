-- Deploy mailroom:view_repeated_attempts to pg
-- requires: table_messages
-- requires: table_attempts

BEGIN;

CREATE VIEW mailroom.repeated_attempts WITH (security_barrier) AS
SELECT substring(m.to_address FROM '^(.*)@[^@]*$') || '@' || m.to_domain AS recipient,
       max(m.recipient_id) AS recipient_id,
       count(DISTINCT a.message_id) AS messages,
       count(DISTINCT a.message_id) FILTER (WHERE m.attempts > 1 OR a.attempt > 1) AS repeated_messages,
       count(*) AS attempts,
       max(a.attempt) AS most_attempts,
       count(*) FILTER (WHERE a.outcome IN ('retry', 'failed', 'ambiguous', 'expired', 'stale')) AS unsuccessful,
       count(*) FILTER (WHERE a.reported = 'sent') AS successful,
       count(*) FILTER (WHERE a.duplicate) AS duplicates,
       max(a.claimed_at) AS last_claimed_at,
       (array_agg(a.outcome ORDER BY a.claimed_at DESC, a.id DESC))[1] AS last_outcome,
       (array_agg(concat_ws(' ', a.smtp_code, a.smtp_enhanced, a.smtp_text) ORDER BY a.claimed_at DESC, a.id DESC)
          FILTER (WHERE a.smtp_code IS NOT NULL OR a.smtp_text IS NOT NULL))[1] AS last_smtp_reply
FROM mailroom.attempts a
JOIN mailroom.messages m ON m.id = a.message_id
WHERE a.outcome IS DISTINCT FROM 'released'
GROUP BY substring(m.to_address FROM '^(.*)@[^@]*$') || '@' || m.to_domain
HAVING count(*) > count(DISTINCT a.message_id);
ALTER VIEW mailroom.repeated_attempts OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.repeated_attempts FROM PUBLIC;
GRANT SELECT ON mailroom.repeated_attempts TO mailroom_operator;
COMMENT ON VIEW mailroom.repeated_attempts IS
  'Recipients (address with the domain lowered) with at least one mail claimed more than once, from the ledger (released claims do not count). Shows retry storms, flaky domains and duplicates per person.';
COMMENT ON COLUMN mailroom.repeated_attempts.unsuccessful IS
  'Attempts that ended retry, failed, ambiguous, expired or stale.';
COMMENT ON COLUMN mailroom.repeated_attempts.duplicates IS
  'Successful sends of a delivery key that had already been sent: this recipient got those mails twice.';

COMMIT;
