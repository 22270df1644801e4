-- Verify mailroom:extend_lease on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.extend_lease(bigint[], uuid, interval)', 'execute');
DO $$
BEGIN
  ASSERT NOT has_function_privilege('mailroom_runner', 'mailroom._extend_lease(bigint[], uuid, interval, timestamptz)', 'execute'),
    'the clock-pinning _extend_lease(bigint[], uuid, interval, timestamptz) must be owner-only';
  ASSERT to_regprocedure('mailroom.extend_lease(bigint[], uuid, interval, timestamptz)') IS NULL,
    'the v0.3 extend_lease with p_now is still executable';
END
$$;

ROLLBACK;
