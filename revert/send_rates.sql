-- Revert mailroom:send_rates from pg (back to v0.3.0: the other helpers keep their v0.4 bodies, which compute the same)

BEGIN;

DROP FUNCTION mailroom._domain_budgets_spend(text[], integer[], integer[], timestamptz, integer);
DROP FUNCTION mailroom._send_budgets(text, text[], integer[], integer[], timestamptz);
DROP FUNCTION mailroom._window_add_counts(bigint[], bigint[], bigint, bigint);
DROP FUNCTION mailroom._window_add_slots(bigint[], bigint, bigint);
DROP FUNCTION mailroom._window_used(bigint[], bigint[], bigint);
DROP FUNCTION mailroom._window_available(bigint[], bigint[], bigint, integer);

COMMIT;
