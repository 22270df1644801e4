-- Revert mailroom:function_next_occurrence from pg: the v0.1.0 zone check, parser and next_occurrence back.

BEGIN;

CREATE OR REPLACE FUNCTION mailroom._zone_check(p_zone text, p_field text DEFAULT 'zone')
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_hint text;
BEGIN
  IF p_zone IS NULL OR btrim(p_zone) = '' THEN
    RAISE EXCEPTION 'mailroom: %: must be an IANA time zone name, got nothing', p_field
      USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT FROM mailroom.time_zones WHERE name = p_zone)
     OR EXISTS (SELECT FROM pg_catalog.pg_timezone_names WHERE name = p_zone) THEN
    RETURN p_zone;
  END IF;
  SELECT name INTO v_hint FROM mailroom.time_zones WHERE lower(name) = lower(p_zone) LIMIT 1;
  RAISE EXCEPTION 'mailroom: %: "%" is not a known IANA time zone', p_field, p_zone
    USING ERRCODE = '22023',
          HINT = coalesce(format('did you mean "%s"?', v_hint),
                          'use a name from pg_timezone_names such as Europe/Berlin');
END
$$;
ALTER FUNCTION mailroom._zone_check(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._zone_check(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._zone_check(text, text) IS
  'Internal: returns the zone when it is a known IANA name, else raises 22023 naming p_field.';

CREATE OR REPLACE FUNCTION mailroom._cron_parse(p_rule text)
RETURNS mailroom.cron_spec
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_rule text := lower(btrim(coalesce(p_rule, '')));
  v_f text[];
  v_spec mailroom.cron_spec;
  v_month int;
  v_ok boolean := false;
BEGIN
  IF v_rule = '' THEN
    RAISE EXCEPTION 'mailroom: rule: must be a 5-field cron expression, got nothing'
      USING ERRCODE = '22023';
  END IF;
  v_rule := CASE v_rule
    WHEN '@yearly' THEN '0 0 1 1 *'  WHEN '@annually' THEN '0 0 1 1 *'
    WHEN '@monthly' THEN '0 0 1 * *' WHEN '@weekly' THEN '0 0 * * 0'
    WHEN '@daily' THEN '0 0 * * *'   WHEN '@midnight' THEN '0 0 * * *'
    WHEN '@hourly' THEN '0 * * * *'  ELSE v_rule END;
  IF left(v_rule, 1) = '@' THEN
    RAISE EXCEPTION 'mailroom: rule: unknown macro "%"', btrim(p_rule)
      USING ERRCODE = '22023',
            HINT = 'macros: @yearly @annually @monthly @weekly @daily @midnight @hourly';
  END IF;
  v_f := regexp_split_to_array(v_rule, '\s+');
  IF cardinality(v_f) <> 5 THEN
    RAISE EXCEPTION 'mailroom: rule: expected 5 fields (minute hour day-of-month month day-of-week), got % in "%"',
      cardinality(v_f), btrim(p_rule) USING ERRCODE = '22023';
  END IF;
  v_spec.minutes := mailroom._cron_field(v_f[1], 'minute', 0, 59);
  v_spec.hours := mailroom._cron_field(v_f[2], 'hour', 0, 23);
  v_spec.days := mailroom._cron_field(v_f[3], 'day-of-month', 1, 31);
  v_spec.months := mailroom._cron_field(v_f[4], 'month', 1, 12,
    ARRAY['JAN','FEB','MAR','APR','MAY','JUN','JUL','AUG','SEP','OCT','NOV','DEC']);
  v_spec.weekdays := ARRAY(
    SELECT DISTINCT d % 7 FROM unnest(mailroom._cron_field(v_f[5], 'day-of-week', 0, 7,
      ARRAY['SUN','MON','TUE','WED','THU','FRI','SAT'])) AS d ORDER BY 1);
  v_spec.days_star := left(v_f[3], 1) = '*';
  v_spec.weekdays_star := left(v_f[5], 1) = '*';
  -- When the day is decided by day-of-month alone (or both must hold), some
  -- allowed month must have one of the allowed days, or the rule never fires.
  IF v_spec.days_star OR v_spec.weekdays_star THEN
    FOREACH v_month IN ARRAY v_spec.months LOOP
      v_ok := v_ok OR v_spec.days[1] <= (CASE WHEN v_month = 2 THEN 29
                                              WHEN v_month IN (4, 6, 9, 11) THEN 30 ELSE 31 END);
    END LOOP;
    IF NOT v_ok THEN
      RAISE EXCEPTION 'mailroom: rule: day-of-month "%" never occurs in month "%"', v_f[3], v_f[4]
        USING ERRCODE = '22023';
    END IF;
  END IF;
  RETURN v_spec;
END
$$;
ALTER FUNCTION mailroom._cron_parse(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._cron_parse(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._cron_parse(text) IS
  'Internal: parses and validates a 5-field cron expression (or @daily-style macro); raises 22023 with the field and the problem.';

CREATE OR REPLACE FUNCTION mailroom.next_occurrence(p_rule text, p_zone text, p_after timestamptz DEFAULT now())
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_spec mailroom.cron_spec := mailroom._cron_parse(p_rule);
BEGIN
  PERFORM mailroom._zone_check(p_zone);
  IF p_after IS NULL THEN
    RAISE EXCEPTION 'mailroom: after: must be an instant, got NULL' USING ERRCODE = '22023';
  END IF;
  RETURN mailroom._next_occurrence(v_spec, p_zone, p_after);
END
$$;
ALTER FUNCTION mailroom.next_occurrence(text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.next_occurrence(text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.next_occurrence(text, text, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.next_occurrence(text, text, timestamptz) IS
  'The UTC instant of the first local occurrence of cron rule p_rule in IANA zone p_zone strictly after p_after. DST gap: first instant after the gap; DST overlap: once, at the first occurrence. Raises 22023 on an unknown zone or a malformed rule.';

COMMIT;
