-- Verify mailroom:reclaim on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.reclaim(integer)', 'execute');
DO $$
BEGIN
  ASSERT NOT has_function_privilege('mailroom_runner', 'mailroom._reclaim(integer, timestamptz)', 'execute'),
    'the clock-pinning _reclaim(integer, timestamptz) must be owner-only';
  ASSERT to_regprocedure('mailroom.reclaim(timestamptz, integer)') IS NULL,
    'the v0.3 reclaim with p_now is still executable';
END
$$;

ROLLBACK;
