-- Deploy mailroom:destination_throttle to pg
-- requires: table_contents
-- requires: table_domain_limits
-- requires: set_setting_typed
-- requires: roles

-- Adaptive throttling per destination group (issue 30, item 1). Receivers
-- answer a sender going too fast with deferrals (421, 450, 451, 4.7.x,
-- Gmail's "4.7.28 ... rate limited", Yahoo's "TSS04", Microsoft's "4.7.650"
-- and "S775"); mailroom's domain limits are numbers an operator must guess.
-- Here the send rate of a destination group is learned AIMD-style:
--
--   * a rate-limit deferral lowers the group's rate to rate x
--     throttle_decrease_factor (0.5), at most once per throttle_interval
--     (1 minute): the mail in flight when the first deferral came back is
--     deferred too, and one burst of them must count once. A deferral right
--     after an increase lowers it at once (that step crossed the limit);
--   * a throttle_interval with sends to the group and no deferral raises it
--     by throttle_increase_step (30 mails per minute, i.e. 0.5 mail/s);
--   * it never rises above its ceiling: the group's own domain_limits row
--     (a group named after a domain), else the default '*' row, else
--     throttle_ceiling (6,000 per minute); once it reaches the ceiling the
--     throttle lifts and the operator's limits alone apply again.
--
-- A group's first deferral starts it at ceiling x factor. The learning step
-- is mailroom._learn_destination_rates, called by mark_outcomes with the
-- batch; the throttle is decided at claim time (claim_batch budgets every
-- domain of a throttled group under one key, 'group:<name>', at the lower
-- of the learned rate and the domain's own limit).
--
-- Destination groups are the receiving providers: a recipient domain is in
-- the group of the longest pattern of mailroom.destination_groups it ends
-- with (a pattern matches itself and its subdomains), else it is a group of
-- its own named after it. The patterns hold recipient domains (gmail.com)
-- and MX host suffixes (google.com matches aspmx.l.google.com). mailroom
-- relays through one SMTP server and does not see the MX; so a domain not
-- listed is learned from the relay's answer text: a deferral whose text
-- names a provider (gsmtp, 4.7.28; TSS04, yahoo; S775, 4.7.650,
-- outlook.com) puts the domain into that provider's group (source
-- 'learned'). Operators add their own with set_destination_group.

BEGIN;

INSERT INTO mailroom.settings (key, value, description) VALUES
  ('throttle_decrease_factor', '0.5',
   'Adaptive throttle: a rate-limit deferral multiplies the destination group''s learned rate by this (at most once per throttle_interval).'),
  ('throttle_interval', '1 minute',
   'Adaptive throttle: the least time between two decreases of a group''s rate, and the clean time (sends, no deferral) that earns one increase.'),
  ('throttle_increase_step', '30',
   'Adaptive throttle: mails per minute a clean throttle_interval adds to a group''s learned rate.'),
  ('throttle_ceiling', '6000',
   'Adaptive throttle: the highest learned rate (mails per minute) of a group the domain limits leave unlimited; a group''s own domain_limits row or the default ''*'' row caps it lower.')
ON CONFLICT (key) DO NOTHING;

CREATE TABLE mailroom.destination_groups (
  pattern    text COLLATE "C" NOT NULL,
  group_name text NOT NULL,
  source     text NOT NULL DEFAULT 'operator',
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT destination_groups_pkey PRIMARY KEY (pattern),
  CONSTRAINT destination_groups_pattern_format
    CHECK (pattern = lower(pattern) AND pattern ~ '^[a-z0-9-]+(\.[a-z0-9-]+)*$' AND length(pattern) <= 253),
  CONSTRAINT destination_groups_group_name_format CHECK (group_name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
  CONSTRAINT destination_groups_source_known CHECK (source IN ('default', 'operator', 'learned'))
);
ALTER TABLE mailroom.destination_groups OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.destination_groups FROM PUBLIC;
COMMENT ON TABLE mailroom.destination_groups IS
  'Destination groups for the adaptive throttle: a recipient domain (or MX host) ending with pattern belongs to group_name (the longest pattern wins); a domain matching none is a group of its own. Operators change it with set_destination_group.';
COMMENT ON COLUMN mailroom.destination_groups.pattern IS 'A lower-case domain or host suffix: matches itself and every name ending with ''.'' || pattern.';
COMMENT ON COLUMN mailroom.destination_groups.source IS
  'default: shipped with mailroom; operator: set_destination_group; learned: a deferral''s text named the provider of a domain no pattern matched.';

INSERT INTO mailroom.destination_groups (pattern, group_name, source) VALUES
  -- Google: consumer domains and the MX hosts of Gmail and Workspace (aspmx.l.google.com).
  ('gmail.com', 'google', 'default'), ('googlemail.com', 'google', 'default'), ('google.com', 'google', 'default'),
  -- Microsoft: consumer domains and Exchange Online's MX (*.mail.protection.outlook.com).
  ('outlook.com', 'microsoft', 'default'), ('hotmail.com', 'microsoft', 'default'), ('live.com', 'microsoft', 'default'),
  ('msn.com', 'microsoft', 'default'), ('hotmail.co.uk', 'microsoft', 'default'), ('hotmail.fr', 'microsoft', 'default'),
  ('hotmail.de', 'microsoft', 'default'), ('outlook.de', 'microsoft', 'default'),
  -- Yahoo (and AOL, on Yahoo's MX: mta5.am0.yahoodns.net).
  ('yahoo.com', 'yahoo', 'default'), ('ymail.com', 'yahoo', 'default'), ('rocketmail.com', 'yahoo', 'default'),
  ('yahoo.co.uk', 'yahoo', 'default'), ('yahoo.fr', 'yahoo', 'default'), ('yahoo.de', 'yahoo', 'default'),
  ('aol.com', 'yahoo', 'default'), ('yahoodns.net', 'yahoo', 'default');

-- UNLOGGED like the send budgets: crash recovery forgets what was learned
-- and every group starts unthrottled (its first deferral teaches it again).
CREATE UNLOGGED TABLE mailroom.destination_throttles (
  group_name         text NOT NULL,
  rate_per_minute    numeric NOT NULL,
  ceiling_per_minute integer NOT NULL,
  in_effect          boolean NOT NULL,
  lowered_since      timestamptz,
  changed_at         timestamptz NOT NULL,
  last_deferral_at   timestamptz,
  last_deferral      text,
  deferrals          bigint NOT NULL DEFAULT 0,
  sent               bigint NOT NULL DEFAULT 0,
  CONSTRAINT destination_throttles_pkey PRIMARY KEY (group_name),
  CONSTRAINT destination_throttles_rate_positive CHECK (rate_per_minute > 0)
);
ALTER TABLE mailroom.destination_throttles OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.destination_throttles FROM PUBLIC;
COMMENT ON TABLE mailroom.destination_throttles IS
  'The adaptive throttle''s learned rate per destination group, written by mark_outcomes (_learn_destination_rates), read by claim_batch while in_effect. UNLOGGED: crash recovery empties it. Operators read destination_rates().';
COMMENT ON COLUMN mailroom.destination_throttles.rate_per_minute IS 'The learned rate: claim_batch grants the group no more than this per minute (and rate/60 per second, at least 1).';
COMMENT ON COLUMN mailroom.destination_throttles.in_effect IS 'The rate is below its ceiling: claims budget the group by it. False once it climbed back to the ceiling.';
COMMENT ON COLUMN mailroom.destination_throttles.lowered_since IS 'When the throttle last came into effect (NULL while it is not).';
COMMENT ON COLUMN mailroom.destination_throttles.changed_at IS 'The rate''s last change (a decrease or an increase): the next one waits throttle_interval.';
COMMENT ON COLUMN mailroom.destination_throttles.last_deferral IS 'The SMTP answer of the last rate-limit deferral (code, enhanced status, text): why the rate was lowered.';
COMMENT ON COLUMN mailroom.destination_throttles.sent IS 'Mails of the group reported sent since the throttle last came into effect.';

-- The group of a recipient domain or host: the longest pattern it ends
-- with, else the name itself. One probe of the primary key per label
-- (a domain's suffixes, longest first). Plain SQL: inlined.
CREATE FUNCTION mailroom._destination_group(p_name text)
RETURNS text
LANGUAGE sql STABLE
AS $$
  SELECT coalesce(
    (SELECT g.group_name
     FROM generate_series(1, cardinality(string_to_array(p_name, '.'))) AS i(n)
     JOIN mailroom.destination_groups g
       ON g.pattern = array_to_string((string_to_array(p_name, '.'))[i.n:], '.')
     ORDER BY i.n
     LIMIT 1),
    p_name)
$$;
ALTER FUNCTION mailroom._destination_group(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._destination_group(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._destination_group(text) IS
  'Internal: the destination group of a domain or host: the group of the longest mailroom.destination_groups pattern it ends with, else the name itself.';

-- A deferral that says "too fast": the codes and enhanced statuses
-- receivers use for it, and the providers' own texts.
CREATE FUNCTION mailroom._is_rate_deferral(p_code integer, p_enhanced text, p_text text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
  SELECT coalesce(p_code BETWEEN 400 AND 499, true)
     AND (p_code IN (421, 450, 451)
          OR p_enhanced LIKE '4.7.%'
          OR coalesce(p_text ~* '(rate.?limit|try (again )?later|too many|throttl|TSS04|4\.7\.28|4\.7\.650|\mS775\M)', false))
$$;
ALTER FUNCTION mailroom._is_rate_deferral(integer, text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._is_rate_deferral(integer, text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._is_rate_deferral(integer, text, text) IS
  'Internal: a 4xx answer that asks the sender to slow down: 421, 450, 451, any 4.7.x, or a text saying rate limited / try later / too many / throttled, Gmail''s 4.7.28, Yahoo''s TSS04, Microsoft''s 4.7.650 or S775.';

-- The provider an answer text names (the relay passes the receiver's text on).
CREATE FUNCTION mailroom._provider_from_text(p_text text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
  SELECT CASE
           WHEN p_text ~* '(\mgsmtp\M|google\.com|\m4\.7\.28\M)' THEN 'google'
           WHEN p_text ~* '(\mTSS0[0-9]\M|yahoo)' THEN 'yahoo'
           WHEN p_text ~* '(\mS775\M|\mS3150\M|4\.7\.650|outlook\.com|hotmail)' THEN 'microsoft'
         END
$$;
ALTER FUNCTION mailroom._provider_from_text(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._provider_from_text(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._provider_from_text(text) IS
  'Internal: google, yahoo or microsoft when an SMTP answer''s text carries that provider''s marks (gsmtp, 4.7.28; TSS04, yahoo; S775, S3150, 4.7.650, outlook.com), else NULL.';

-- The ceiling of a group's learned rate, in mails per minute.
CREATE FUNCTION mailroom._throttle_ceiling(p_group text)
RETURNS integer
LANGUAGE sql STABLE
AS $$
  SELECT least(mailroom._setting('throttle_ceiling')::integer,
               (SELECT least(d.max_per_second::bigint * 60, d.max_per_minute)
                FROM mailroom.domain_limits d
                WHERE d.domain = coalesce((SELECT o.domain FROM mailroom.domain_limits o WHERE o.domain = p_group), '*')))::integer
$$;
ALTER FUNCTION mailroom._throttle_ceiling(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._throttle_ceiling(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._throttle_ceiling(text) IS
  'Internal: the highest learned rate of a destination group (mails per minute): its own domain_limits row (a group named after a domain), else the default ''*'' row, capped by the setting throttle_ceiling.';

-- What claim_batch budgets a candidate's domain under while its group is
-- throttled: the group's key and the learned rate as per-second and
-- per-minute limits. No row while the group is not throttled. Plain SQL:
-- inlined into the claim.
CREATE FUNCTION mailroom._throttle_for(p_domain text)
RETURNS TABLE (budget_key text, per_second integer, per_minute integer)
LANGUAGE sql STABLE
AS $$
  SELECT 'group:' || t.group_name,
         greatest(1, floor(t.rate_per_minute / 60))::integer,
         greatest(1, floor(t.rate_per_minute))::integer
  FROM mailroom.destination_throttles t
  WHERE t.group_name = mailroom._destination_group(p_domain) AND t.in_effect
$$;
ALTER FUNCTION mailroom._throttle_for(text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._throttle_for(text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._throttle_for(text) IS
  'Internal (claim_batch): for a recipient domain whose destination group is throttled, the budget key group:<name> and the learned rate as limits per second (rate/60, at least 1) and per minute; no row otherwise.';

-- The learning step, from a batch of outcomes as mark_outcomes takes them
-- (already checked by it). Cheap when nothing is throttled: the batch is
-- looked at only for a retry outcome; while a group is throttled the
-- batch's sent mail is counted per group (a contents lookup per mail).
CREATE FUNCTION mailroom._learn_destination_rates(p_results jsonb, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_throttled boolean := EXISTS (SELECT FROM mailroom.destination_throttles t WHERE t.in_effect);
  v_factor    numeric;
  v_interval  interval;
  v_step      numeric;
BEGIN
  IF NOT v_throttled AND NOT jsonb_path_exists(p_results, '$[*] ? (@.outcome == "retry")') THEN
    RETURN;
  END IF;
  v_factor := mailroom._setting('throttle_decrease_factor')::numeric;
  v_interval := mailroom._setting('throttle_interval')::interval;
  v_step := mailroom._setting('throttle_increase_step')::numeric;

  WITH reports AS (
    SELECT (x ->> 'id')::bigint AS id, x ->> 'outcome' AS outcome,
           x ->> 'outcome' = 'retry'
             AND mailroom._is_rate_deferral((x ->> 'smtp_code')::integer, x ->> 'smtp_enhanced', x ->> 'detail') AS deferred,
           left(concat_ws(' ', x ->> 'smtp_code', x ->> 'smtp_enhanced', x ->> 'detail'), 500) AS answer
    FROM jsonb_array_elements(p_results) AS x
  ),
  learned AS MATERIALIZED (
    SELECT coalesce(r.provider, mailroom._destination_group(t.to_domain)) AS grp, t.to_domain AS domain,
           r.provider, r.deferred, r.answer
    FROM (SELECT r.id, r.deferred, r.answer,
                 CASE WHEN r.deferred THEN mailroom._provider_from_text(r.answer) END AS provider
          FROM reports r
          WHERE r.deferred OR (v_throttled AND r.outcome = 'sent')) AS r
    JOIN mailroom.contents t ON t.id = ANY (ARRAY[r.id])
  ),
  -- A domain no pattern knows, named by its provider's answer: learned.
  taught AS (
    INSERT INTO mailroom.destination_groups (pattern, group_name, source)
    SELECT DISTINCT l.domain, l.provider, 'learned'
    FROM learned l
    WHERE l.provider IS NOT NULL AND mailroom._destination_group(l.domain) = l.domain
      AND l.domain ~ '^[a-z0-9-]+(\.[a-z0-9-]+)*$' AND length(l.domain) <= 253
    ON CONFLICT (pattern) DO NOTHING
  )
  INSERT INTO mailroom.destination_throttles AS d
         (group_name, rate_per_minute, ceiling_per_minute, in_effect, lowered_since, changed_at,
          last_deferral_at, last_deferral, deferrals, sent)
  SELECT a.grp, greatest(1, c.ceiling * v_factor), c.ceiling, true, p_now, p_now,
         CASE WHEN a.deferrals > 0 THEN p_now END, a.answer, a.deferrals, a.sent
  FROM (SELECT l.grp, count(*) FILTER (WHERE l.deferred) AS deferrals, count(*) FILTER (WHERE NOT l.deferred) AS sent,
               (array_agg(l.answer) FILTER (WHERE l.deferred))[1] AS answer
        FROM learned l GROUP BY l.grp) AS a
  CROSS JOIN LATERAL (SELECT mailroom._throttle_ceiling(a.grp) AS ceiling) AS c
  WHERE a.deferrals > 0 OR EXISTS (SELECT FROM mailroom.destination_throttles x WHERE x.group_name = a.grp)
  ORDER BY a.grp
  ON CONFLICT (group_name) DO UPDATE
  SET (rate_per_minute, ceiling_per_minute, in_effect, lowered_since, changed_at, last_deferral_at, last_deferral,
       deferrals, sent) = (
        SELECT n.rate, EXCLUDED.ceiling_per_minute, n.rate < EXCLUDED.ceiling_per_minute,
               CASE WHEN n.rate >= EXCLUDED.ceiling_per_minute THEN NULL
                    WHEN d.in_effect THEN d.lowered_since ELSE p_now END,
               CASE WHEN n.rate <> d.rate_per_minute OR (n.rate < EXCLUDED.ceiling_per_minute) <> d.in_effect
                    THEN p_now ELSE d.changed_at END,
               CASE WHEN n.deferred THEN p_now ELSE d.last_deferral_at END,
               CASE WHEN n.deferred THEN EXCLUDED.last_deferral ELSE d.last_deferral END,
               d.deferrals + EXCLUDED.deferrals,
               CASE WHEN d.in_effect THEN d.sent ELSE 0 END + EXCLUDED.sent
        FROM (SELECT CASE
                       -- Multiplicative decrease, at most once per interval (a
                       -- group out of effect starts again from its ceiling).
                       WHEN EXCLUDED.deferrals > 0 AND NOT d.in_effect
                         THEN greatest(1, EXCLUDED.ceiling_per_minute * v_factor)
                       -- (Also at once when the last change was an increase:
                       -- the step that crossed the receiver's limit is taken back.)
                       WHEN EXCLUDED.deferrals > 0
                            AND (p_now - d.changed_at >= v_interval OR d.changed_at > d.last_deferral_at)
                         THEN greatest(1, least(d.rate_per_minute, EXCLUDED.ceiling_per_minute) * v_factor)
                       WHEN EXCLUDED.deferrals > 0 THEN least(d.rate_per_minute, EXCLUDED.ceiling_per_minute)
                       -- Additive increase after a clean interval with sends.
                       WHEN d.in_effect AND EXCLUDED.sent > 0 AND p_now - d.changed_at >= v_interval
                            AND (d.last_deferral_at IS NULL OR p_now - d.last_deferral_at >= v_interval)
                         THEN least(EXCLUDED.ceiling_per_minute, d.rate_per_minute + v_step)
                       WHEN d.in_effect THEN least(d.rate_per_minute, EXCLUDED.ceiling_per_minute)
                       ELSE EXCLUDED.ceiling_per_minute
                     END AS rate,
                     EXCLUDED.deferrals > 0 AS deferred) AS n);
END
$$;
ALTER FUNCTION mailroom._learn_destination_rates(jsonb, timestamptz) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._learn_destination_rates(jsonb, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._learn_destination_rates(jsonb, timestamptz) IS
  'Internal (mark_outcomes): the adaptive throttle''s learning step for a batch of outcomes: a rate-limit deferral (_is_rate_deferral) multiplies its destination group''s rate by throttle_decrease_factor at most once per throttle_interval (a first one starts the group at its ceiling x factor); a clean interval with sends adds throttle_increase_step, up to the ceiling, where the throttle lifts.';

-- Operators: put a domain or MX suffix into a group (NULL group: remove it).
CREATE FUNCTION mailroom.set_destination_group(p_pattern text, p_group text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
DECLARE
  v_pattern text := lower(p_pattern);
BEGIN
  IF v_pattern IS NULL OR v_pattern !~ '^[a-z0-9-]+(\.[a-z0-9-]+)*$' OR length(v_pattern) > 253 THEN
    RAISE EXCEPTION 'mailroom: pattern: must be a domain or host suffix such as gmail.com, got %', coalesce(p_pattern, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_group IS NULL THEN
    DELETE FROM mailroom.destination_groups WHERE pattern = v_pattern;
    RETURN;
  END IF;
  IF p_group !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
    RAISE EXCEPTION 'mailroom: group: must be 1 to 63 lower-case letters, digits, dots, dashes or underscores, got %', p_group
      USING ERRCODE = '22023';
  END IF;
  INSERT INTO mailroom.destination_groups AS g (pattern, group_name, source, updated_at)
  VALUES (v_pattern, p_group, 'operator', now())
  ON CONFLICT (pattern) DO UPDATE SET group_name = EXCLUDED.group_name, source = 'operator', updated_at = now();
END
$$;
ALTER FUNCTION mailroom.set_destination_group(text, text) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_destination_group(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_destination_group(text, text) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_destination_group(text, text) IS
  'Put recipient domains or MX hosts ending with p_pattern into destination group p_group for the adaptive throttle (NULL p_group removes the pattern). 22023 for a pattern that is no domain or a bad group name.';

-- Operators: what the throttle learned, for mailroom status, the console
-- and the metrics.
CREATE FUNCTION mailroom.destination_rates()
RETURNS TABLE (group_name text, in_effect boolean, rate_per_minute numeric, ceiling_per_minute integer,
               lowered_since timestamptz, changed_at timestamptz, last_deferral_at timestamptz,
               last_deferral text, deferrals bigint, sent bigint)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
  SELECT t.group_name, t.in_effect, round(t.rate_per_minute, 1), t.ceiling_per_minute, t.lowered_since, t.changed_at,
         t.last_deferral_at, t.last_deferral, t.deferrals, t.sent
  FROM mailroom.destination_throttles t
  ORDER BY t.in_effect DESC, t.group_name
$$;
ALTER FUNCTION mailroom.destination_rates() OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.destination_rates() FROM PUBLIC;
-- Runners too: they export it as metrics (mailroom/metrics.py).
GRANT EXECUTE ON FUNCTION mailroom.destination_rates() TO mailroom_operator, mailroom_runner;
COMMENT ON FUNCTION mailroom.destination_rates() IS
  'The adaptive throttle per destination group: whether it is in effect, the learned rate and its ceiling (mails per minute), since when it is lowered, its last change, the last rate-limit deferral (why) and counts.';

COMMIT;
