-- Deploy mailroom:function_next_occurrence to pg (rework for v0.4)
-- requires: function_next_occurrence@v0.3.0
-- requires: split_messages
--
-- This file defines every function of the change, so it is where a reader
-- finds them (issue 13, "findable code"): _cron_value, _cron_field,
-- _local_to_instant and _next_occurrence were until now only in the v0.1.0
-- copy. Nothing changes: each function is its v0.3.0 definition, copied
-- verbatim (the v0.2.0 rework's _zone_check, _cron_parse and next_occurrence,
-- the v0.1.0 rest). The type cron_spec and the table time_zones stay as
-- deploy/function_next_occurrence@v0.1.0.sql created them.
--
-- The v0.2.0 rework's findings (tests/test_hostile.py):
-- * next_occurrence('...', zone, 'infinity') returned NULL and a far-off
--   instant ('294276-12-31') failed with 22008 "timestamp out of range": the
--   instant is now checked (1900 to 8999) and named in a 22023 error.
-- * An unknown zone without a case-insensitive match hinted 'did you mean ""?'
--   (format() turns NULL into ''): it now hints a real example.
-- * A rule is at most 1000 characters.
--
-- next_occurrence takes p_after, not a clock: it computes and stores nothing,
-- so a caller's instant cannot move any state (issue 13, item 4).

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
          HINT = CASE WHEN v_hint IS NOT NULL THEN format('did you mean "%s"?', v_hint)
                      ELSE 'use a name from pg_timezone_names such as Europe/Berlin' END;
END
$$;
ALTER FUNCTION mailroom._zone_check(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._zone_check(text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._zone_check(text, text) IS
  'Internal: returns the zone when it is a known IANA name, else raises 22023 naming p_field.';

-- One value of a field: a number or (month, weekday) a three-letter name.
CREATE OR REPLACE FUNCTION mailroom._cron_value(p_token text, p_field text, p_min int, p_max int, p_names text[])
RETURNS int
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_value int;
  v_pos int;
BEGIN
  IF p_token ~ '^[0-9]{1,6}$' THEN
    v_value := p_token::int;
  ELSIF p_names IS NOT NULL THEN
    v_pos := array_position(p_names, upper(p_token));
    IF v_pos IS NULL THEN
      RAISE EXCEPTION 'mailroom: rule: %: "%" is neither a number nor a name (%)',
        p_field, p_token, array_to_string(p_names, ',') USING ERRCODE = '22023';
    END IF;
    RETURN p_min + v_pos - 1;
  ELSE
    RAISE EXCEPTION 'mailroom: rule: %: "%" is not a number', p_field, p_token
      USING ERRCODE = '22023';
  END IF;
  IF v_value < p_min OR v_value > p_max THEN
    RAISE EXCEPTION 'mailroom: rule: %: % is out of range %-%', p_field, v_value, p_min, p_max
      USING ERRCODE = '22023';
  END IF;
  RETURN v_value;
END
$$;
ALTER FUNCTION mailroom._cron_value(text, text, int, int, text[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._cron_value(text, text, int, int, text[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._cron_value(text, text, int, int, text[]) IS
  'Internal: one cron value (number or name) checked against the field''s range.';

-- One field: comma list of *, N, A-B, with optional /step.
CREATE OR REPLACE FUNCTION mailroom._cron_field(p_text text, p_field text, p_min int, p_max int, p_names text[] DEFAULT NULL)
RETURNS int[]
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_item text;
  v_parts text[];
  v_range text[];
  v_lo int;
  v_hi int;
  v_step int;
  v_out int[] := '{}';
BEGIN
  FOREACH v_item IN ARRAY string_to_array(p_text, ',') LOOP
    IF v_item = '' THEN
      RAISE EXCEPTION 'mailroom: rule: %: empty item in list "%"', p_field, p_text
        USING ERRCODE = '22023';
    END IF;
    v_parts := string_to_array(v_item, '/');
    IF cardinality(v_parts) > 2 THEN
      RAISE EXCEPTION 'mailroom: rule: %: "%" has more than one /', p_field, v_item
        USING ERRCODE = '22023';
    END IF;
    v_step := 1;
    IF cardinality(v_parts) = 2 THEN
      IF v_parts[2] !~ '^[0-9]{1,6}$' OR v_parts[2]::int = 0 THEN
        RAISE EXCEPTION 'mailroom: rule: %: step "%" must be a positive integer', p_field, v_parts[2]
          USING ERRCODE = '22023';
      END IF;
      v_step := v_parts[2]::int;
    END IF;
    IF v_parts[1] = '*' THEN
      v_lo := p_min;
      v_hi := p_max;
    ELSIF strpos(v_parts[1], '-') > 0 THEN
      v_range := string_to_array(v_parts[1], '-');
      IF cardinality(v_range) <> 2 OR v_range[1] = '' OR v_range[2] = '' THEN
        RAISE EXCEPTION 'mailroom: rule: %: "%" is not a range A-B', p_field, v_parts[1]
          USING ERRCODE = '22023';
      END IF;
      v_lo := mailroom._cron_value(v_range[1], p_field, p_min, p_max, p_names);
      v_hi := mailroom._cron_value(v_range[2], p_field, p_min, p_max, p_names);
      IF v_lo > v_hi THEN
        RAISE EXCEPTION 'mailroom: rule: %: range "%" runs backwards', p_field, v_parts[1]
          USING ERRCODE = '22023';
      END IF;
    ELSIF v_parts[1] = '' THEN
      RAISE EXCEPTION 'mailroom: rule: %: "%" has no value before /', p_field, v_item
        USING ERRCODE = '22023';
    ELSE
      v_lo := mailroom._cron_value(v_parts[1], p_field, p_min, p_max, p_names);
      v_hi := CASE WHEN cardinality(v_parts) = 2 THEN p_max ELSE v_lo END;
    END IF;
    FOR v_value IN v_lo .. v_hi BY v_step LOOP
      v_out := v_out || v_value;
    END LOOP;
  END LOOP;
  RETURN ARRAY(SELECT DISTINCT u FROM unnest(v_out) AS u ORDER BY u);
END
$$;
ALTER FUNCTION mailroom._cron_field(text, text, int, int, text[]) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._cron_field(text, text, int, int, text[]) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._cron_field(text, text, int, int, text[]) IS
  'Internal: expands one cron field (lists, ranges, steps, names) into its sorted values; raises 22023 naming the field.';

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
  IF length(v_rule) > 1000 THEN
    RAISE EXCEPTION 'mailroom: rule: longer than 1000 characters (%)', length(v_rule)
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

-- Local wall time -> the one instant it runs at.
CREATE OR REPLACE FUNCTION mailroom._local_to_instant(p_local timestamp, p_zone text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_t timestamptz := p_local AT TIME ZONE p_zone;
  v_back timestamp := v_t AT TIME ZONE p_zone;
  v_day_before timestamptz;
  v_t0 timestamptz;
  v_lo bigint;
  v_hi bigint;
  v_mid bigint;
BEGIN
  IF v_back = p_local THEN
    -- PostgreSQL resolves an ambiguous wall time to the later instant. If the
    -- offset a day earlier was larger, the same wall time may have existed
    -- before the fall-back: take that first occurrence.
    v_day_before := v_t - interval '1 day';
    v_t0 := (p_local - ((v_day_before AT TIME ZONE p_zone) - (v_day_before AT TIME ZONE 'UTC')))
            AT TIME ZONE 'UTC';
    IF v_t0 < v_t AND (v_t0 AT TIME ZONE p_zone) = p_local THEN
      RETURN v_t0;
    END IF;
    RETURN v_t;
  END IF;
  -- A wall time inside a spring-forward gap: the first instant whose local
  -- time is at or after it is the transition itself (binary search in
  -- seconds around PostgreSQL's guess; the gap is |v_back - p_local| long).
  v_mid := abs(extract(epoch FROM v_back - p_local))::bigint;
  v_lo := extract(epoch FROM v_t)::bigint - v_mid - 1;
  v_hi := extract(epoch FROM v_t)::bigint + v_mid;
  IF (to_timestamp(v_lo) AT TIME ZONE p_zone) >= p_local
     OR (to_timestamp(v_hi) AT TIME ZONE p_zone) < p_local THEN
    RETURN v_t;  -- not a simple gap (cannot happen with tzdata); keep PostgreSQL's answer
  END IF;
  WHILE v_hi - v_lo > 1 LOOP
    v_mid := (v_lo + v_hi) / 2;
    IF (to_timestamp(v_mid) AT TIME ZONE p_zone) >= p_local THEN
      v_hi := v_mid;
    ELSE
      v_lo := v_mid;
    END IF;
  END LOOP;
  RETURN to_timestamp(v_hi);
END
$$;
ALTER FUNCTION mailroom._local_to_instant(timestamp, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._local_to_instant(timestamp, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._local_to_instant(timestamp, text) IS
  'Internal: the instant a local wall time in p_zone runs at: in a DST gap the first instant after the gap, in a DST overlap the first of the two.';

CREATE OR REPLACE FUNCTION mailroom._next_occurrence(p_spec mailroom.cron_spec, p_zone text, p_after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_local timestamp := p_after AT TIME ZONE p_zone;
  v_date date := v_local::date;
  v_limit date := v_local::date + interval '30 years';
  v_h0 int := extract(hour FROM v_local)::int;
  v_m0 int := extract(minute FROM v_local)::int;
  v_first boolean := true;
  v_day_ok boolean;
  v_dom boolean;
  v_dow boolean;
  v_h int;
  v_m int;
  v_t timestamptz;
BEGIN
  WHILE v_date < v_limit LOOP
    IF NOT (extract(month FROM v_date)::int = ANY (p_spec.months)) THEN
      v_date := (date_trunc('month', v_date) + interval '1 month')::date;
      v_first := false;
      CONTINUE;
    END IF;
    v_dom := extract(day FROM v_date)::int = ANY (p_spec.days);
    v_dow := extract(dow FROM v_date)::int = ANY (p_spec.weekdays);
    v_day_ok := CASE WHEN p_spec.days_star OR p_spec.weekdays_star THEN v_dom AND v_dow
                     ELSE v_dom OR v_dow END;
    IF v_day_ok THEN
      FOREACH v_h IN ARRAY p_spec.hours LOOP
        CONTINUE WHEN v_first AND v_h < v_h0;
        FOREACH v_m IN ARRAY p_spec.minutes LOOP
          CONTINUE WHEN v_first AND v_h = v_h0 AND v_m < v_m0;
          v_t := mailroom._local_to_instant(v_date + make_time(v_h, v_m, 0), p_zone);
          IF v_t > p_after THEN
            RETURN v_t;
          END IF;
        END LOOP;
      END LOOP;
    END IF;
    v_date := v_date + 1;
    v_first := false;
  END LOOP;
  RETURN NULL;  -- e.g. 29 February on a given weekday beyond the horizon
END
$$;
ALTER FUNCTION mailroom._next_occurrence(mailroom.cron_spec, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._next_occurrence(mailroom.cron_spec, text, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._next_occurrence(mailroom.cron_spec, text, timestamptz) IS
  'Internal: next_occurrence on an already parsed rule and checked zone (no validation); NULL when nothing matches within 30 years.';

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
  -- The search looks 30 years ahead in local time: keep it inside the range
  -- timestamps can hold (infinity or year 294276 would raise 22008 or return NULL).
  IF NOT isfinite(p_after) OR p_after < timestamptz '1900-01-01 00:00Z' OR p_after >= timestamptz '9000-01-01 00:00Z' THEN
    RAISE EXCEPTION 'mailroom: after: must be an instant from 1900 to 8999, got %', p_after USING ERRCODE = '22023';
  END IF;
  RETURN mailroom._next_occurrence(v_spec, p_zone, p_after);
END
$$;
ALTER FUNCTION mailroom.next_occurrence(text, text, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.next_occurrence(text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.next_occurrence(text, text, timestamptz) TO mailroom_app, mailroom_operator;
COMMENT ON FUNCTION mailroom.next_occurrence(text, text, timestamptz) IS
  'The UTC instant of the first local occurrence of cron rule p_rule in IANA zone p_zone strictly after p_after. DST gap: first instant after the gap; DST overlap: once, at the first occurrence. Raises 22023 on an unknown zone, a malformed rule or an instant outside 1900-8999.';

COMMIT;
