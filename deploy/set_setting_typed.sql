-- Deploy mailroom:set_setting_typed to pg
-- requires: table_settings
-- requires: settings_operations
-- requires: table_schedules
-- requires: cache_settings
-- requires: validation
-- requires: set_setting_typed@v0.4.0
--
-- set_setting (created by table_settings) stored any text: 'lots' as
-- max_body_bytes made every later enqueue fail with 22P02, 'soon' as
-- retry_backoff_base broke every retry (tests/test_hostile.py). Now each value
-- is cast to its setting's type and range-checked before anything is written.
--
-- v0.4 (rework): the retention settings of prune_feedback join the list.
-- feedback_retention is at least 7 days: an MTA retries a DSN for up to 5
-- days (Postfix's maximal_queue_lifetime) and providers retry webhooks for
-- hours to days; an event retired before its last redelivery would be
-- recorded again (a second bounced ledger row, a second count against the
-- circuit breaker).
--
-- v0.5 (rework): the adaptive throttle's settings (destination_throttle)
-- and the warm-up's (sender_warmup) join the list, with a numeric kind for
-- the throttle's decrease factor; and event_retention, the age at which
-- prune_events retires the event feed (deploy/event_feed.sql), at least 1
-- day: an application or a webhook endpoint that was down over a weekend
-- must not find its events gone; and event_retention_max, how long events
-- an active webhook endpoint has not had yet are kept past event_retention.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._check_setting(p_key text, p_value text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_kind text;
  v_min  text;
  v_max  text;
  v_num  numeric;
  v_iv   interval;
BEGIN
  -- The one place that knows each setting's type and bounds: the type is the
  -- cast its readers apply to mailroom._setting(key); the bounds are those the
  -- readers check themselves, or what keeps their arithmetic in range.
  SELECT t.kind, t.lo, t.hi INTO v_kind, v_min, v_max
  FROM (VALUES
    ('max_body_bytes',        'bigint',   '1',             '1073741824'),  -- _check_body; 1 GiB is the most a text value holds
    ('cache_max_entries',     'bigint',   '0',             '1000000000'),  -- cache_sweep; 0 empties the cache
    ('prune_batch_size',      'integer',  '1',             '1000000'),     -- prune checks the same
    ('prune_max_batches',     'integer',  '1',             '10000'),       -- prune checks the same
    ('schedule_batch',        'integer',  '1',             '1000000'),     -- materialize_schedules' limit
    ('retry_backoff_base',    'interval', '1 millisecond', '1 day'),       -- _retry_delay
    ('retry_backoff_max',     'interval', '1 millisecond', '30 days'),     -- _retry_delay
    ('attempts_retention',    'interval', '1 day',         '100 years'),   -- prune's older_than
    ('feedback_retention',    'interval', '7 days',        '100 years'),   -- prune_feedback; a DSN is retried for up to 5 days
    ('inbound_unparsed_retention', 'interval', '1 day',    '100 years'),   -- prune_feedback
    ('event_retention',       'interval', '1 day',         '100 years'),   -- prune_events
    ('event_retention_max',   'interval', '1 day',         '100 years'),   -- prune_events, for an active webhook endpoint behind
    ('lease_warning_after',   'interval', '1 millisecond', '1 day'),       -- queue_stats; a lease is at most 1 day
    ('schedule_lookahead',    'interval', '0',             '1 hour'),      -- materialize_schedules runs every minute
    ('schedule_max_lateness', 'interval', '1 minute',      '366 days'),    -- materialize_schedules runs every minute
    ('throttle_decrease_factor', 'numeric', '0.05',        '0.95'),        -- _learn_destination_rates: 1 would never lower
    ('throttle_interval',     'interval', '1 second',      '1 hour'),      -- _learn_destination_rates
    ('throttle_increase_step', 'numeric', '0.1',           '100000'),      -- mails per minute added per clean interval
    ('throttle_ceiling',      'integer',  '1',             '10000000'),    -- mails per minute; the domain_limits cap it further
    ('warmup_transactional_reserve', 'numeric', '0',       '1'),           -- share of the day's budget kept for transactional mail
    ('warmup_hold',           'interval', '1 second',      '1 day')        -- how far broadcast mail held by the reserve is re-timed
  ) AS t(key, kind, lo, hi)
  WHERE t.key = p_key;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'mailroom: %: no type is known for this setting', p_key
      USING ERRCODE = '22023', HINT = 'Add it to mailroom._check_setting.';
  END IF;
  IF p_value IS NULL THEN
    RAISE EXCEPTION 'mailroom: %: must not be NULL', p_key USING ERRCODE = '22023';
  END IF;

  IF v_kind = 'numeric' THEN
    BEGIN
      v_num := p_value::numeric;
    EXCEPTION WHEN data_exception THEN
      RAISE EXCEPTION 'mailroom: %: must be a number, got "%"', p_key, p_value USING ERRCODE = '22023';
    END;
    PERFORM mailroom._check_range(p_key, v_num, v_min::numeric, v_max::numeric);
  ELSIF v_kind IN ('integer', 'bigint') THEN
    BEGIN
      v_num := p_value::bigint;
    EXCEPTION WHEN data_exception THEN
      RAISE EXCEPTION 'mailroom: %: must be a whole number, got "%"', p_key, p_value USING ERRCODE = '22023';
    END;
    PERFORM mailroom._check_range(p_key, v_num, v_min::numeric, v_max::numeric);
  ELSE
    BEGIN
      v_iv := p_value::interval;
    EXCEPTION WHEN data_exception THEN
      RAISE EXCEPTION 'mailroom: %: must be an interval such as ''30 seconds'', got "%"', p_key, p_value
        USING ERRCODE = '22023';
    END;
    IF v_iv < v_min::interval OR v_iv > v_max::interval THEN
      RAISE EXCEPTION 'mailroom: %: must be between % and %, got %', p_key, v_min, v_max, p_value
        USING ERRCODE = '22023';
    END IF;
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_setting(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_setting(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_setting(text, text) IS
  'Internal: raise 22023 unless p_value casts to the type of setting p_key and lies within its bounds. The one list of every setting''s type and bounds.';

CREATE OR REPLACE FUNCTION mailroom.set_setting(p_key text, p_value text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF NOT EXISTS (SELECT FROM mailroom.settings WHERE key = p_key) THEN
    RAISE EXCEPTION 'mailroom: key: no setting named "%"', p_key
      USING ERRCODE = '22023', HINT = 'SELECT key FROM mailroom.settings lists them.';
  END IF;
  PERFORM mailroom._check_setting(p_key, p_value);
  UPDATE mailroom.settings SET value = p_value WHERE key = p_key;
END
$$;
ALTER FUNCTION mailroom.set_setting(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_setting(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_setting(text, text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_setting(text, text) IS
  'Change one existing setting (operators). The value must cast to the setting''s type and lie within its bounds (mailroom._check_setting); otherwise 22023 and nothing is written.';

COMMIT;
