-- Verify mailroom:set_setting_typed on pg

BEGIN;

SELECT has_function_privilege('mailroom.set_setting(text, text)', 'execute');
SELECT has_function_privilege('mailroom._check_setting(text, text)', 'execute');
DO $$
BEGIN
  BEGIN
    PERFORM mailroom.set_setting('max_body_bytes', 'lots');
    RAISE EXCEPTION 'set_setting stored ''lots'' as max_body_bytes';
  EXCEPTION WHEN invalid_parameter_value THEN
    NULL;
  END;
END
$$;

-- v0.4: the retention settings of prune_feedback have a type (22023 otherwise).
SELECT mailroom._check_setting('feedback_retention', '90 days');
SELECT mailroom._check_setting('inbound_unparsed_retention', '14 days');

-- v0.5: the throttle's and the warm-up's settings have a type.
SELECT mailroom._check_setting('throttle_decrease_factor', '0.5');
SELECT mailroom._check_setting('warmup_transactional_reserve', '0.1');
SELECT mailroom._check_setting('event_retention', '30 days');
SELECT mailroom._check_setting('event_retention_max', '60 days');

ROLLBACK;
