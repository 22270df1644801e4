-- Verify mailroom:release on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.release(bigint[], uuid)', 'execute');
DO $$
BEGIN
  ASSERT NOT has_function_privilege('mailroom_runner', 'mailroom._release(bigint[], uuid, timestamptz)', 'execute'),
    'the clock-pinning _release(bigint[], uuid, timestamptz) must be owner-only';
  ASSERT to_regprocedure('mailroom.release(bigint[], uuid, timestamptz)') IS NULL,
    'the v0.3 release with p_now is still executable';
END
$$;

ROLLBACK;
