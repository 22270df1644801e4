-- Verify mailroom:circuit_breaker on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.resume_sender(text)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_operator',
  'mailroom.set_breaker_thresholds(text, integer, integer, numeric, numeric, numeric, numeric)', 'execute')::int;
SELECT 'mailroom._breaker_tally(text, text, integer, integer, integer, timestamptz)'::regprocedure;
SELECT 'mailroom._breaker_count_outcomes(bigint[], text[], bigint[], text[], timestamptz)'::regprocedure;
SELECT 'mailroom._breaker_figures(text, text, integer)'::regprocedure;
SELECT 'mailroom._breaker_pending_count(text, text)'::regprocedure;
SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.breaker_fold()', 'execute')::int;
SELECT 'mailroom._breaker_reset(text, text, timestamptz)'::regprocedure;
SELECT scope, key, campaign_name, state, delivered, bounced, complained, bounce_rate, complaint_rate,
       tripped_at, reason, updated_at
FROM mailroom.breaker_status WHERE false;
SELECT 1/has_table_privilege('mailroom_operator', 'mailroom.breaker_status', 'select')::int;

ROLLBACK;
