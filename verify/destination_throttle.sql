-- Verify mailroom:destination_throttle on pg

BEGIN;

SELECT group_name, in_effect, rate_per_minute, ceiling_per_minute, lowered_since, changed_at, last_deferral_at,
       last_deferral, deferrals, sent
FROM mailroom.destination_throttles WHERE false;
SELECT 1 / count(*) FROM mailroom.destination_groups WHERE pattern = 'gmail.com' AND group_name = 'google';
SELECT has_function_privilege('mailroom_operator', 'mailroom.destination_rates()', 'execute');
SELECT has_function_privilege('mailroom_operator', 'mailroom.set_destination_group(text, text)', 'execute');
DO $$
BEGIN
  ASSERT mailroom._destination_group('aspmx.l.google.com') = 'google', 'an MX suffix does not find its group';
  ASSERT mailroom._destination_group('example.org') = 'example.org', 'an unknown domain is not its own group';
  ASSERT mailroom._is_rate_deferral(421, '4.7.28', 'rate limited'), 'Gmail''s 421 4.7.28 is no rate deferral';
  ASSERT NOT mailroom._is_rate_deferral(550, '5.1.1', 'no such user'), 'a bounce is a rate deferral';
  ASSERT NOT has_function_privilege('mailroom_runner', 'mailroom._learn_destination_rates(jsonb, timestamptz)', 'execute'),
    'the learning step must be owner-only';
END
$$;

ROLLBACK;
