-- Revert mailroom:send_rates from pg (back to v0.3.0: the other helpers are unchanged)

BEGIN;

DROP FUNCTION mailroom._send_budgets(text, text[], integer[], integer[], timestamptz);

COMMIT;
