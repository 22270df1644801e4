-- Security: who may do what, for every object in schema mailroom, and that a
-- caller's search_path changes nothing a mailroom function does.
--
-- The tables below are the decisions. They are checked against the catalogue,
-- so a new function, view or grant without a decision here fails this file:
-- add a row to decisions (or readers) with the roles it is meant for.
-- No Sqitch change of its own: it tests the whole deployed schema.
BEGIN;
SET LOCAL search_path = public, pg_catalog;  -- pgTAP lives in public

-- Every function: which group roles may execute it, and how it is protected.
-- kind: definer  SECURITY DEFINER, SET search_path = mailroom, pg_temp
--       invoker  SECURITY INVOKER, path pinned all the same (a validation helper)
--       unpinned SECURITY INVOKER without SET (so the planner can inline it)
--       caller   SECURITY INVOKER, the caller's rights and path by design
-- mailroom_app executes _campaign_open and _campaign_fill because enqueue_campaign
-- (SECURITY INVOKER) calls them as the caller; both are definer and validate.
-- No function a group role executes takes p_now (issue 13, item 4; see also
-- tests/pgtap/no_clock_on_roles.sql): the clock is the database's, and the
-- owner-only twins _name(..., p_now) that tests pin it with are granted to
-- nobody, nor are the internal helpers no role's call path needs.
CREATE TEMP TABLE decisions (fn text PRIMARY KEY, roles text NOT NULL, kind text NOT NULL) ON COMMIT DROP;
INSERT INTO decisions (fn, roles, kind) VALUES
  ('cache_delete(text)', 'app', 'definer'),
  ('cache_delete_prefix(text)', 'app', 'definer'),
  ('cache_get(text)', 'app', 'definer'),
  ('cache_get_or_lock(text, interval)', 'app', 'definer'),
  ('cache_set(text, jsonb, interval)', 'app', 'definer'),
  ('cache_sweep(bigint)', 'operator', 'definer'),
  ('cache_unlock(text)', 'app', 'definer'),
  ('cancel(bigint[], text)', 'operator', 'definer'),
  ('forget(text)', 'operator', 'definer'),  -- erasure (docs/erasure.md)
  ('is_forgotten(text)', 'operator', 'definer'),
  ('cancel_campaign(bigint)', 'app,operator', 'definer'),
  ('campaign_summaries(integer)', 'operator', 'definer'),  -- the console's campaigns page
  ('_campaign_eta(text, bigint, bigint, bigint, bigint, bigint, timestamp with time zone, timestamp with time zone)', 'app,operator', 'definer'),  -- campaign_progress's readers call it
  ('claim_batch(text, integer, interval, text)', 'runner', 'definer'),
  ('delete_domain_limits(text)', 'operator', 'definer'),
  ('destination_rates()', 'operator,runner', 'definer'),  -- runners export it as metrics
  ('set_destination_group(text, text)', 'operator', 'definer'),
  ('set_sender_warmup(text, integer[], date)', 'operator', 'definer'),
  ('clear_sender_warmup(text)', 'operator', 'definer'),
  ('sender_warmup_status()', 'operator,runner', 'definer'),  -- runners export it as metrics
  ('warmup_default_ramp()', 'operator', 'definer'),
  ('_learn_destination_rates(jsonb, timestamp with time zone)', '', 'definer'),
  ('_destination_group(text)', '', 'unpinned'),
  ('_is_rate_deferral(integer, text, text)', '', 'unpinned'),
  ('_provider_from_text(text)', '', 'unpinned'),
  ('_throttle_ceiling(text)', '', 'unpinned'),
  ('_throttle_for(text)', '', 'unpinned'),
  ('_warmup_day(date, integer[], date, integer, date)', '', 'unpinned'),
  ('domain_demand(text[])', 'operator', 'definer'),  -- a fleet directory's rebalance reads it (fleet/deploy/domain_limits.sql)
  ('campaign_lookup(text)', 'app,operator', 'definer'),  -- fleet campaigns find a campaign by name (fleet/deploy/campaigns.sql)
  ('suppressions_written(xid8, text, text, integer)', 'operator', 'definer'),  -- the fleet's suppression sync reads it (fleet/deploy/suppression_sync.sql)
  ('suppress_copies(text[], text[], text[], text[], text[])', 'operator', 'definer'),  -- the fleet's suppression sync writes with it
  ('define_stream(text, boolean, text)', 'operator', 'definer'),
  ('delivery_metrics(interval)', 'operator', 'definer'),
  ('enqueue(text, text, text, text, jsonb, text, timestamp with time zone, integer, text, integer, text, jsonb, text, text)', 'app', 'definer'),
  ('enqueue_campaign(text, text, text, integer, timestamp with time zone, jsonb, text, time without time zone, time without time zone, text, jsonb, integer, text, text)', 'app', 'caller'),
  ('enqueues_settled()', 'runner', 'definer'),
  ('extend_lease(bigint[], uuid, interval)', 'runner', 'definer'),
  ('feedback_message_id_matches(bigint, text)', 'feedback', 'definer'),
  ('find_messages(text, integer)', 'operator', 'definer'),
  ('failures_by_sender(interval)', 'operator', 'definer'),
  ('finish_campaigns()', 'operator', 'definer'),
  ('get_templates(text[])', 'operator,runner', 'definer'),
  ('inspect(text)', 'operator', 'definer'),
  ('integrity_problems()', 'operator', 'definer'),
  ('keep_unparsed_inbound(bytea, text, text, text)', 'feedback', 'definer'),
  ('mark_outcome(bigint, uuid, text, text, integer, text, text)', 'runner', 'definer'),
  ('mark_outcomes(jsonb)', 'runner', 'definer'),
  ('materialize_schedules(integer)', 'operator', 'definer'),
  ('message_by_message_id(text)', 'feedback,operator', 'definer'),
  ('next_occurrence(text, text, timestamp with time zone)', 'app,operator', 'definer'),
  ('next_window_opening(text, time without time zone, time without time zone, timestamp with time zone)', 'app,operator', 'definer'),
  ('open_transactions()', 'operator', 'definer'),
  ('overdue_counts(interval)', 'operator', 'definer'),
  ('pause_campaign(bigint)', 'app,operator', 'definer'),
  ('prune(interval, integer)', 'operator', 'definer'),
  ('prune_feedback(integer)', 'operator', 'definer'),
  ('events_since(text, integer, text, bigint, text, text[])', 'app,operator', 'definer'),  -- the event feed (docs/events.md)
  ('events_head()', 'app,operator', 'definer'),
  ('prune_events(integer)', 'operator', 'definer'),
  ('_prune_events(integer, timestamp with time zone)', '', 'definer'),
  ('_events_from_ledger()', '', 'definer'),        -- triggers
  ('_events_from_feedback()', '', 'definer'),
  ('_events_from_suppressions()', '', 'definer'),
  ('_event_cursor(text)', '', 'invoker'),
  ('_event_kinds_check(text, text[])', '', 'invoker'),
  ('_events_held()', '', 'invoker'),             -- prune_events: the oldest active webhook cursor
  ('webhook_endpoint_set(text, text, text, text[], text[], integer, boolean)', 'operator', 'definer'),
  ('webhook_endpoint_pause(text)', 'operator', 'definer'),
  ('webhook_endpoint_resume(text)', 'operator', 'definer'),
  ('webhook_endpoint_delete(text)', 'operator', 'definer'),
  ('webhook_claim(text, text[], integer, integer, interval)', 'runner', 'definer'),
  ('webhook_report(text, uuid, text, integer, text, interval)', 'runner', 'definer'),
  ('rate_limit(text, integer, interval)', 'app', 'definer'),
  ('rate_limit_sliding(text, integer, interval)', 'app', 'definer'),
  ('rate_limit_sweep()', 'operator', 'definer'),
  ('reclaim(integer)', 'operator,runner', 'definer'),
  -- feedback reporters only: mailroom inbound, the webhooks, and applications
  -- granted mailroom_feedback; runners never report feedback
  ('record_feedback(text, bigint, text, text, text, text, text)', 'feedback', 'definer'),
  ('release(bigint[], uuid)', 'runner', 'definer'),
  ('resolve_review(bigint, text)', 'operator', 'definer'),
  ('resume_campaign(bigint)', 'app,operator', 'definer'),
  ('resume_sender(text)', 'operator', 'definer'),
  ('breaker_fold()', 'operator', 'definer'),
  ('set_breaker_thresholds(text, integer, integer, numeric, numeric, numeric, numeric)', 'operator', 'definer'),
  ('retry(bigint[])', 'operator', 'definer'),
  ('retry_campaign(bigint)', 'operator', 'definer'),
  ('runner_waiting(boolean)', 'runner', 'definer'),
  ('runner_heartbeat(text, uuid, text, integer, text, text, integer, interval, integer, bigint, bigint, bigint, bigint, boolean, text)', 'runner', 'definer'),
  ('runner_gone(text, uuid)', 'runner', 'definer'),
  ('runner_warnings()', 'operator', 'definer'),
  ('schedule_list(integer)', 'operator', 'definer'),
  ('schedule_set_active(text, boolean)', 'app,operator', 'definer'),
  ('schedule_upsert(text, text, text, text, text, jsonb, boolean, time without time zone, time without time zone, text, integer, text, text, text)', 'app', 'definer'),
  ('send_rate_retry_after(text)', 'runner', 'definer'),
  ('send_rate_usage()', 'operator', 'definer'),
  ('set_domain_limits(text, integer, integer)', 'operator', 'definer'),
  ('set_sender_limits(text, integer, integer)', 'operator', 'definer'),
  ('set_setting(text, text)', 'operator', 'definer'),
  ('set_submission_credential(text, text, text, text[], integer, text)', 'operator', 'definer'),
  ('drop_submission_credential(text)', 'operator', 'definer'),
  ('submission_credential_list()', 'operator', 'definer'),
  ('submission_login(text)', 'submission', 'definer'),  -- the submit server reads one login's hash
  ('submission_recipient_refusal(text, text)', 'submission', 'definer'),  -- and checks a recipient at RCPT TO
  ('stream_settings()', 'operator,runner', 'definer'),
  ('suppress(text, text, text, text)', 'app,operator', 'definer'),
  ('suppression_search(text, integer)', 'operator', 'definer'),
  ('throughput(interval, interval)', 'operator', 'definer'),
  ('unsubscribe(text, text, bigint, text)', 'unsubscribe', 'definer'),  -- the unsubscribe service's one right (deploy/unsubscribe.sql)
  ('unsuppress(text, text)', 'app,operator', 'definer'),
  ('upsert_template(text, text, text, text)', 'app,operator', 'definer'),
  ('_address_key(text)', '', 'unpinned'),
  ('_address_ok(text)', '', 'unpinned'),
  ('_wire_address(text)', '', 'unpinned'),
  ('_idna_domain(text)', '', 'definer'),
  ('_punycode(text)', '', 'definer'),
  ('_contents_wire_address()', '', 'definer'),
  ('_cache_lock_id(text)', '', 'unpinned'),
  ('_cache_take_load(text)', '', 'definer'),
  ('_breaker_feedback_event()', '', 'definer'),
  ('_breaker_count_outcomes(bigint[], text[], bigint[], text[], timestamp with time zone)', '', 'definer'),
  ('_breaker_figures(text, text, integer)', '', 'definer'),
  ('_breaker_pending_count(text, text)', '', 'definer'),
  ('_breaker_reset(text, text, timestamp with time zone)', '', 'definer'),
  ('_breaker_tally(text, text, integer, integer, integer, timestamp with time zone)', '', 'definer'),
  ('_campaign_chunk_size()', '', 'definer'),
  ('_campaign_fill(bigint)', 'app', 'definer'),
  ('_campaign_lock(bigint)', '', 'definer'),
  ('_campaign_open(text, text, integer, timestamp with time zone, jsonb, text, time without time zone, time without time zone, text, jsonb, integer, text, text)', 'app', 'definer'),
  -- the lazy queueing of campaign mail: called by _campaign_fill, claim_batch,
  -- the revert; nobody executes them directly
  ('_campaign_queue_all(bigint, timestamp with time zone)', '', 'definer'),
  ('_campaign_queue_chunk(bigint, integer, timestamp with time zone)', '', 'definer'),
  ('_campaign_top_up(timestamp with time zone)', '', 'definer'),
  ('_check_address(text, text)', '', 'invoker'),
  ('_forgotten_hash(text)', '', 'invoker'),
  ('_forgotten_bit(text)', '', 'invoker'),  -- forget's bit in forgotten_filter (claim_batch's gate writes it out)
  ('_mentions(text, text)', '', 'invoker'),
  ('_check_stream(text)', '', 'definer'),
  ('_check_body(text, text)', '', 'invoker'),
  ('_check_header_text(text, text)', '', 'invoker'),
  ('_check_headers(jsonb)', '', 'invoker'),
  ('_check_ids(bigint[])', '', 'invoker'),
  ('_check_lease(interval)', '', 'invoker'),
  ('_check_range(text, numeric, numeric, numeric)', '', 'invoker'),
  ('_check_send_rate(integer, integer)', '', 'invoker'),
  ('_check_setting(text, text)', '', 'invoker'),
  ('_claim_batch(text, integer, interval, text, timestamp with time zone)', '', 'definer'),
  ('_claim_gate(text, text, bigint, bigint, text, timestamp with time zone)', '', 'unpinned'),
  ('_window_opening(text, text, time without time zone, time without time zone, text, time without time zone, time without time zone, timestamp with time zone)', '', 'unpinned'),
  ('_claim_refused(bigint[], uuid, text[], timestamp with time zone)', '', 'definer'),
  ('_claim_recheck_delay()', '', 'definer'),
  ('_queued_priorities()', '', 'unpinned'),
  ('_cron_field(text, text, integer, integer, text[])', '', 'definer'),
  ('_cron_parse(text)', '', 'definer'),
  ('_cron_value(text, text, integer, integer, text[])', '', 'definer'),
  ('_delivery_metrics(interval, timestamp with time zone)', '', 'definer'),
  ('_epoch_us(timestamp with time zone)', '', 'unpinned'),
  ('_extend_lease(bigint[], uuid, interval, timestamp with time zone)', '', 'definer'),
  ('_from_epoch_us(bigint)', '', 'unpinned'),
  ('_local_to_instant(timestamp without time zone, text)', '', 'definer'),
  ('_mark_outcome(bigint, uuid, text, text, integer, text, text, timestamp with time zone)', '', 'definer'),
  ('_mark_outcomes(jsonb, timestamp with time zone)', '', 'definer'),
  ('_materialize_schedules(integer, timestamp with time zone)', '', 'definer'),
  ('_message_id_parts(text)', '', 'invoker'),
  ('_next_occurrence(mailroom.cron_spec, text, timestamp with time zone)', '', 'definer'),
  ('_prune(interval, integer, timestamp with time zone)', '', 'definer'),
  ('_prune_feedback(integer, timestamp with time zone)', '', 'definer'),
  ('_rate_check_args(text, integer, interval)', '', 'unpinned'),
  ('_rate_free_at(bigint[], integer[], integer, interval, timestamp with time zone)', '', 'unpinned'),
  ('_rate_limit(text, integer, interval, timestamp with time zone)', '', 'definer'),
  ('_rate_sliding_take(text, integer, integer, interval, timestamp with time zone)', '', 'definer'),
  ('_rate_slot(timestamp with time zone, interval)', '', 'unpinned'),
  ('_rate_slots_add(bigint[], integer[], bigint, integer)', '', 'unpinned'),
  ('_rate_slots_used(bigint[], integer[], bigint)', '', 'unpinned'),
  ('_reclaim(integer, timestamp with time zone)', '', 'definer'),
  ('_release(bigint[], uuid, timestamp with time zone)', '', 'definer'),
  ('_retry(bigint[])', '', 'definer'),
  ('_retry_delay(integer)', '', 'invoker'),
  ('_schedule_delivery_key(bigint, timestamp with time zone, text, text)', '', 'invoker'),
  ('_schedule_retime(mailroom.schedules, mailroom.schedules, timestamp with time zone)', '', 'definer'),
  ('_schedule_set_active(text, boolean, timestamp with time zone)', '', 'definer'),
  ('_schedule_upsert(text, text, text, text, text, jsonb, boolean, time without time zone, time without time zone, text, integer, text, text, text, timestamp with time zone)', '', 'definer'),
  ('_send_budgets(text, text[], integer[], integer[], timestamp with time zone)', '', 'definer'),
  ('_domain_budgets_spend(text[], integer[], integer[], timestamp with time zone, integer)', '', 'definer'),
  ('_send_rate_available(text, integer, integer, timestamp with time zone)', '', 'definer'),
  ('_send_rate_record(text[], integer[], interval[], timestamp with time zone)', '', 'definer'),
  ('_send_rate_retry_after(text, timestamp with time zone)', '', 'definer'),
  ('_throughput(interval, interval, timestamp with time zone)', '', 'definer'),
  ('_setting(text)', '', 'invoker'),
  ('_window_check(time without time zone, time without time zone)', '', 'definer'),
  ('_window_add_counts(bigint[], bigint[], bigint, bigint)', '', 'unpinned'),
  ('_window_add_slots(bigint[], bigint, bigint)', '', 'unpinned'),
  ('_window_available(bigint[], bigint[], bigint, integer)', '', 'unpinned'),
  ('_window_hits(bigint[])', '', 'unpinned'),
  ('_window_used(bigint[], bigint[], bigint)', '', 'unpinned'),
  ('_window_open(text, time without time zone, time without time zone, timestamp with time zone)', '', 'definer'),
  ('_zone_check(text, text)', '', 'definer');

CREATE TEMP TABLE kinds (kind text PRIMARY KEY, why text NOT NULL) ON COMMIT DROP;
INSERT INTO kinds VALUES
  ('definer', 'runs as mailroom_owner with search_path = mailroom, pg_temp (pg_catalog first, pg_temp last)'),
  ('invoker', 'a validation helper: needs no rights of its own and runs inside its definer caller; no group role may call it'),
  ('unpinned', 'plain SQL the planner inlines into its caller (a SET clause stops inlining; _claim_gate is '
               'inlined into _claim_batch), or the plpgsql '
               'argument check _rate_check_args; no group role may call it, so it runs under its definer '
               'caller''s pinned path, or in an index or constraint, where every name is schema-qualified '
               '(_address_key: tests/pgtap/address_key_qualified.sql)'),
  ('caller', 'enqueue_campaign runs the caller''s recipients query with the caller''s rights and search_path '
             '(deploy/enqueue_campaign.sql); it writes through _campaign_open and _campaign_fill (definer)');

-- Which group roles may read each view (every other relation: nobody).
CREATE TEMP TABLE readers (rel text PRIMARY KEY, roles text NOT NULL) ON COMMIT DROP;
INSERT INTO readers VALUES
  ('breaker_status', 'operator'),
  ('campaign_progress', 'app,operator'),
  ('current_settings', 'operator'),
  ('delivered_keys', 'operator'),
  ('duplicate_deliveries', 'operator'),
  ('expired_leases', 'operator'),
  ('messages', ''),  -- the read model: operators read mail through the operator views and inspect
  ('overdue', 'operator'),
  ('queue_stats', 'operator'),
  ('repeated_attempts', 'operator'),
  ('review_queue', 'operator'),
  ('runner_status', 'operator'),
  ('send_limits', 'operator'),
  ('stream_overview', 'operator'),
  ('webhook_status', 'operator');

CREATE TEMP TABLE group_roles (role name PRIMARY KEY, short text) ON COMMIT DROP;
INSERT INTO group_roles VALUES ('mailroom_app', 'app'), ('mailroom_runner', 'runner'),
                               ('mailroom_operator', 'operator'), ('mailroom_unsubscribe', 'unsubscribe'),
                               ('mailroom_feedback', 'feedback'), ('mailroom_submission', 'submission'),
                               ('public', NULL);

CREATE TEMP VIEW catalog_fns AS
  SELECT p.oid, (p.proname::text || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')') COLLATE "default" AS fn,
         p.prosecdef, p.proowner,
         coalesce('search_path=mailroom, pg_temp' = ANY (p.proconfig), false) AS pinned,
         coalesce(EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%'), false) AS any_path
  FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'mailroom'::regnamespace;
CREATE TEMP VIEW catalog_rels AS
  SELECT c.relname::text AS rel, c.relkind, c.relowner, c.reloptions
  FROM pg_catalog.pg_class c
  WHERE c.relnamespace = 'mailroom'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S');

SELECT plan((SELECT count(*)::int FROM decisions) * (SELECT count(*)::int FROM group_roles)
            + (SELECT count(*)::int FROM catalog_rels) * (SELECT count(*)::int FROM group_roles)
            + 83);  -- the fixed tests below

-- == Functions: a decision for each, and exactly the grants it names ============
SELECT set_eq($$SELECT fn FROM catalog_fns$$, $$SELECT fn FROM decisions$$,
              'every function in schema mailroom has a decision in this file, and no decision is stale');
SELECT function_privs_are(
         'mailroom', split_part(d.fn, '(', 1),
         string_to_array(rtrim(substr(d.fn, strpos(d.fn, '(') + 1), ')'), ', ')::name[],
         g.role,
         CASE WHEN g.short = ANY (string_to_array(d.roles, ',')) THEN ARRAY['EXECUTE'] ELSE ARRAY[]::name[] END,
         format('%s: %s', g.role, CASE WHEN g.short = ANY (string_to_array(d.roles, ',')) THEN 'may' ELSE 'may not' END)
           || ' execute ' || d.fn)
FROM decisions d CROSS JOIN group_roles g
ORDER BY d.fn, g.role;

SELECT is_empty($$
  SELECT d.fn, d.kind, c.prosecdef, c.pinned, c.any_path FROM decisions d JOIN catalog_fns c USING (fn)
  WHERE NOT CASE d.kind WHEN 'definer'  THEN c.prosecdef AND c.pinned
                        WHEN 'invoker'  THEN NOT c.prosecdef AND c.pinned
                        ELSE NOT c.prosecdef AND NOT c.any_path END
$$, 'every function is SECURITY DEFINER with search_path = mailroom, pg_temp, or one of the listed kinds');
SELECT set_eq($$SELECT DISTINCT kind FROM decisions WHERE kind <> 'definer'$$, $$SELECT kind FROM kinds WHERE kind <> 'definer'$$,
              'every kind of SECURITY INVOKER function has its reason in this file');
SELECT results_eq($$SELECT fn FROM decisions WHERE kind = 'caller'$$,
                  $$VALUES ('enqueue_campaign(text, text, text, integer, timestamp with time zone, jsonb, text, time without time zone, time without time zone, text, jsonb, integer, text, text)')$$,
                  'enqueue_campaign is the one function that runs with the caller''s rights');
SELECT is_empty($$SELECT fn, roles FROM decisions WHERE kind IN ('invoker', 'unpinned') AND roles <> ''$$,
                'no group role may call a function that borrows its rights and path from its caller');
SELECT results_eq($$
  SELECT DISTINCT c.fn FROM pg_catalog.pg_depend dep JOIN catalog_fns c ON c.oid = dep.refobjid
  WHERE dep.refclassid = 'pg_proc'::regclass
    AND dep.classid IN ('pg_class'::regclass, 'pg_constraint'::regclass, 'pg_attrdef'::regclass,
                        'pg_trigger'::regclass, 'pg_rewrite'::regclass, 'pg_type'::regclass)
    AND NOT c.prosecdef
$$, $$VALUES ('_address_key(text)')$$,
  'the only SECURITY INVOKER function an index, constraint, default, trigger or view evaluates is _address_key');
SELECT is_empty($$SELECT fn FROM catalog_fns WHERE proowner <> 'mailroom_owner'::regrole$$,
                'mailroom_owner owns every function');
SELECT is_empty($$
  SELECT c.fn, r.rolname FROM catalog_fns c JOIN pg_catalog.pg_roles r ON r.oid = c.proowner
  WHERE r.rolsuper OR r.rolcanlogin
$$, 'no function is owned by a superuser or a login role');

-- == Relations: nobody but the named readers of views ===========================
SELECT set_eq($$SELECT rel FROM catalog_rels WHERE relkind IN ('v', 'm')$$, $$SELECT rel FROM readers$$,
              'every view has a decision on who reads it');
SELECT CASE WHEN c.relkind = 'S'
            THEN sequence_privs_are('mailroom', c.rel, g.role, ARRAY[]::name[],
                                    format('%s: no privilege on sequence %s', g.role, c.rel))
            ELSE table_privs_are('mailroom', c.rel, g.role,
                                 CASE WHEN g.short = ANY (string_to_array(r.roles, ',')) THEN ARRAY['SELECT']
                                      ELSE ARRAY[]::name[] END,
                                 format('%s: %s on %s', g.role,
                                        CASE WHEN g.short = ANY (string_to_array(r.roles, ',')) THEN 'SELECT only'
                                             ELSE 'no privilege' END, c.rel))
       END
FROM catalog_rels c CROSS JOIN group_roles g LEFT JOIN readers r USING (rel)
ORDER BY c.rel, g.role;
SELECT is_empty($$SELECT rel FROM catalog_rels WHERE relowner <> 'mailroom_owner'::regrole$$,
                'mailroom_owner owns every table, view and sequence');
SELECT is_empty($$
  SELECT a.attrelid::regclass, a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
  WHERE c.relnamespace = 'mailroom'::regnamespace AND a.attacl IS NOT NULL
$$, 'no column-level grants');
SELECT is_empty($$
  SELECT rel FROM catalog_rels WHERE relkind = 'v' AND rel <> 'campaign_progress'
    AND NOT coalesce('security_barrier=true' = ANY (reloptions), false)
$$, 'every filtering view is a security_barrier (campaign_progress only aggregates per campaign)');
SELECT is_empty($$
  SELECT t.typname FROM pg_catalog.pg_type t
  WHERE t.typnamespace = 'mailroom'::regnamespace AND t.typelem = 0
    AND (t.typrelid = 0 OR (SELECT relkind FROM pg_catalog.pg_class WHERE oid = t.typrelid) = 'c')
    AND (has_type_privilege('public', t.oid, 'usage') OR t.typowner <> 'mailroom_owner'::regrole)
$$, 'PUBLIC has no USAGE on any type of mailroom, and mailroom_owner owns them');
SELECT is_empty($$
  SELECT * FROM pg_catalog.pg_default_acl WHERE defaclnamespace IN (0, 'mailroom'::regnamespace)
    AND defaclrole IN ('mailroom_owner'::regrole)
$$, 'no default privileges hand out new objects');

-- == Schema and roles ============================================================
SELECT schema_privs_are('mailroom', 'public', ARRAY[]::name[], 'PUBLIC may not even look up names in mailroom');
SELECT schema_privs_are('mailroom', 'mailroom_app', ARRAY['USAGE'], 'mailroom_app: USAGE only');
SELECT schema_privs_are('mailroom', 'mailroom_runner', ARRAY['USAGE'], 'mailroom_runner: USAGE only');
SELECT schema_privs_are('mailroom', 'mailroom_operator', ARRAY['USAGE'], 'mailroom_operator: USAGE only');
SELECT schema_privs_are('mailroom', 'mailroom_feedback', ARRAY['USAGE'], 'mailroom_feedback: USAGE only');
SELECT schema_privs_are('mailroom', 'mailroom_unsubscribe', ARRAY['USAGE'], 'mailroom_unsubscribe: USAGE only');
SELECT schema_privs_are('mailroom', 'mailroom_submission', ARRAY['USAGE'], 'mailroom_submission: USAGE only');
SELECT is_empty($$
  SELECT rolname FROM pg_catalog.pg_roles
  WHERE rolname IN ('mailroom_owner', 'mailroom_app', 'mailroom_runner', 'mailroom_operator', 'mailroom_feedback',
                    'mailroom_unsubscribe', 'mailroom_submission')
    AND (rolcanlogin OR rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls)
$$, 'the seven mailroom roles are NOLOGIN and hold no special attribute');
SELECT is_empty($$SELECT member::regrole FROM pg_catalog.pg_auth_members WHERE roleid = 'mailroom_owner'::regrole$$,
                'no role is a member of mailroom_owner');
SELECT is_empty($$
  SELECT roleid::regrole, member::regrole FROM pg_catalog.pg_auth_members
  WHERE roleid IN ('mailroom_app'::regrole, 'mailroom_runner'::regrole, 'mailroom_operator'::regrole,
                   'mailroom_feedback'::regrole, 'mailroom_unsubscribe'::regrole, 'mailroom_submission'::regrole)
    AND member IN ('mailroom_app'::regrole, 'mailroom_runner'::regrole, 'mailroom_operator'::regrole,
                   'mailroom_feedback'::regrole, 'mailroom_unsubscribe'::regrole, 'mailroom_submission'::regrole)
$$, 'the group roles are not members of one another');
SELECT is_empty($$
  SELECT roleid::regrole FROM pg_catalog.pg_auth_members
  WHERE member = 'mailroom_owner'::regrole AND roleid <> 'pg_read_all_stats'::regrole
$$, 'mailroom_owner is a member of pg_read_all_stats at most (queue_stats sees every session)');

-- == The roles at work (SET ROLE) ===============================================
SELECT lives_ok($$SELECT mailroom.upsert_template('sec-tpl', 'Hi', 'Body')$$, 'a template (as the superuser)');
SET LOCAL ROLE mailroom_app;
SELECT lives_ok($$SELECT mailroom.enqueue('sec.app@example.com', 's', 'b', p_delivery_key => 'sec-app')$$,
                'mailroom_app: enqueue');
SELECT lives_ok($$SELECT mailroom.cache_set('sec:k', '1')$$, 'mailroom_app: cache_set');
SELECT is(mailroom.cache_get('sec:k'), '1'::jsonb, 'mailroom_app: cache_get');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('sec', 10)$$, '42501',
                 'permission denied for function claim_batch', 'mailroom_app cannot claim');
SELECT throws_ok($$SELECT mailroom.mark_outcomes('[]')$$, '42501',
                 'permission denied for function mark_outcomes', 'mailroom_app cannot report outcomes');
SELECT throws_ok($$SELECT * FROM mailroom.messages$$, '42501',
                 'permission denied for view messages', 'mailroom_app cannot read messages');
SELECT throws_ok($$SELECT * FROM mailroom.contents$$, '42501',
                 'permission denied for table contents', 'mailroom_app cannot read contents');
SELECT throws_ok($$SELECT * FROM mailroom.attempts$$, '42501',
                 'permission denied for table attempts', 'mailroom_app cannot read attempts');
SELECT throws_ok($$SELECT * FROM mailroom.cache$$, '42501',
                 'permission denied for table cache', 'mailroom_app reads the cache through cache_get only');
SELECT throws_ok($$UPDATE mailroom.queue SET status = 'queued', run_at = now()$$, '42501',
                 'permission denied for table queue', 'mailroom_app cannot change the queue');
SELECT throws_ok($$INSERT INTO mailroom.contents (delivery_key, sender, to_address, max_attempts, on_ambiguous)
                   VALUES ('sec-direct', 'default', 'sec.direct@example.com', 1, 'retry')$$, '42501',
                 'permission denied for table contents', 'mailroom_app cannot write contents');
SELECT throws_ok($$DELETE FROM mailroom.runner_waits$$, '42501',
                 'permission denied for table runner_waits', 'mailroom_app cannot touch runner_waits');
SELECT throws_ok($$SELECT mailroom.enqueue('sec.app@example.com', 's', 'b', p_now => '2100-01-01')$$, '42883',
                 NULL, 'mailroom_app: enqueue takes no p_now');
SELECT throws_ok($$SELECT * FROM mailroom._rate_limit('sec', 1, '1 minute', '2100-01-01')$$, '42501',
                 'permission denied for function _rate_limit', 'mailroom_app cannot move the limiter''s clock');
SELECT throws_ok($$SELECT * FROM mailroom.overdue$$, '42501',
                 'permission denied for view overdue', 'mailroom_app cannot read the operator views');
SELECT lives_ok($$SELECT * FROM mailroom.campaign_progress$$, 'mailroom_app reads campaign_progress');
RESET ROLE;

SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT mailroom.enqueue('sec.runner@example.com', 's', 'b')$$, '42501',
                 'permission denied for function enqueue', 'mailroom_runner cannot enqueue');
SELECT throws_ok($$SELECT mailroom.cache_get('sec:k')$$, '42501',
                 'permission denied for function cache_get', 'mailroom_runner cannot read the cache');
SELECT throws_ok($$SELECT mailroom.cache_set('sec:k', '2')$$, '42501',
                 'permission denied for function cache_set', 'mailroom_runner cannot write the cache');
SELECT throws_ok($$SELECT * FROM mailroom.cache_sweep(0)$$, '42501',
                 'permission denied for function cache_sweep', 'mailroom_runner cannot empty the cache');
SELECT throws_ok($$SELECT * FROM mailroom.rate_limit('sec', 1, '1 minute')$$, '42501',
                 'permission denied for function rate_limit', 'mailroom_runner cannot use the applications'' limiter');
SELECT throws_ok($$SELECT * FROM mailroom.messages$$, '42501',
                 'permission denied for view messages', 'mailroom_runner cannot read messages directly');
SELECT throws_ok($$UPDATE mailroom.queue SET leased_until = 'infinity'$$, '42501',
                 'permission denied for table queue', 'mailroom_runner cannot change leases but through the functions');
SELECT throws_ok($$SELECT * FROM mailroom.attempts$$, '42501',
                 'permission denied for table attempts', 'mailroom_runner cannot read the ledger');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('sec-runner', 10, p_now => '2100-01-01')$$, '42883',
                 NULL, 'mailroom_runner: claim_batch takes no p_now (issue 13, hole 4)');
SELECT throws_ok($$SELECT mailroom.reclaim(p_now => 'infinity')$$, '42883',
                 NULL, 'mailroom_runner: reclaim takes no p_now');
SELECT throws_ok($$SELECT * FROM mailroom._claim_batch('sec-runner', 10, '5 minutes', NULL, '2100-01-01')$$, '42501',
                 'permission denied for function _claim_batch', 'mailroom_runner cannot call claim_batch''s owner-only twin');
SELECT throws_ok($$SELECT mailroom._reclaim(10, 'infinity')$$, '42501',
                 'permission denied for function _reclaim', 'nor reclaim''s');
SELECT throws_ok($$SELECT mailroom._mark_outcomes('[]', '2100-01-01')$$, '42501',
                 'permission denied for function _mark_outcomes', 'nor mark_outcomes''s');
SELECT throws_ok($$SELECT * FROM mailroom.campaign_progress$$, '42501',
                 'permission denied for view campaign_progress', 'mailroom_runner cannot read views');
SELECT is((SELECT count(*)::int FROM mailroom.claim_batch('sec-runner', 10)), 1, 'mailroom_runner claims');
RESET ROLE;

SET LOCAL ROLE mailroom_operator;
SELECT lives_ok($$SELECT * FROM mailroom.queue_stats$$, 'mailroom_operator reads queue_stats');
SELECT throws_ok($$SELECT * FROM mailroom.messages$$, '42501',
                 'permission denied for view messages', 'mailroom_operator reads messages through the operator views and inspect only');
SELECT throws_ok($$SELECT * FROM mailroom.queue$$, '42501',
                 'permission denied for table queue', 'and reads no table (queue)');
SELECT lives_ok($$SELECT * FROM mailroom.integrity_problems()$$, 'mailroom_operator checks integrity');
SELECT throws_ok($$SELECT * FROM mailroom._prune(NULL, NULL, '2100-01-01')$$, '42501',
                 'permission denied for function _prune', 'mailroom_operator cannot move prune''s clock');
SELECT throws_ok($$SELECT * FROM mailroom._delivery_metrics('1 hour', '2100-01-01')$$, '42501',
                 'permission denied for function _delivery_metrics', 'nor delivery_metrics''s');
SELECT throws_ok($$SELECT mailroom._reclaim(10, 'infinity')$$, '42501',
                 'permission denied for function _reclaim', 'nor reclaim''s');
SELECT throws_ok($$SELECT mailroom._materialize_schedules(10, '2100-01-01')$$, '42501',
                 'permission denied for function _materialize_schedules', 'nor materialize_schedules''s');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('sec', 10)$$, '42501',
                 'permission denied for function claim_batch', 'mailroom_operator cannot claim');
SELECT throws_ok($$SELECT mailroom.enqueue('sec.op@example.com', 's', 'b')$$, '42501',
                 'permission denied for function enqueue', 'mailroom_operator cannot enqueue');
RESET ROLE;

-- A login role as docs/security.md creates one, and one without any grant.
CREATE ROLE sec_app_login LOGIN;
GRANT mailroom_app TO sec_app_login;
CREATE ROLE sec_nobody LOGIN;
SET LOCAL ROLE sec_app_login;
SELECT lives_ok($$SELECT mailroom.enqueue('sec.login@example.com', 's', 'b')$$,
                'a login role granted mailroom_app enqueues');
SELECT throws_ok($$SELECT * FROM mailroom.messages$$, '42501',
                 'permission denied for view messages', 'and cannot read messages');
RESET ROLE;
SET LOCAL ROLE sec_nobody;
SELECT throws_ok($$SELECT mailroom.enqueue('sec.nobody@example.com', 's', 'b')$$, '42501',
                 'permission denied for schema mailroom', 'a role without a grant cannot call anything');
SELECT throws_ok($$SELECT * FROM mailroom.queue_stats$$, '42501',
                 'permission denied for schema mailroom', 'nor read any view');
RESET ROLE;

-- == search_path hijack ===========================================================
-- An attacker who can create objects in a schema on a caller's search_path
-- (PUBLIC lost CREATE on public in PostgreSQL 15, so the superuser plants them
-- in schema hijack) shadows pg_catalog's functions and operators, and temporary
-- tables shadow mailroom's. Every planted function records who ran it and, run
-- as mailroom_owner (inside a SECURITY DEFINER function), answers wrongly.
CREATE SCHEMA hijack;
GRANT USAGE ON SCHEMA hijack TO PUBLIC;
CREATE TABLE hijack.log (fn text, who name, armed text, tables_denied boolean);
GRANT INSERT ON hijack.log TO PUBLIC;
CREATE FUNCTION hijack._hit(p_fn text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_armed  text := current_setting('sec.armed', true);
  v_denied boolean;
BEGIN
  IF v_armed = 'campaign' THEN  -- inside enqueue_campaign: could the planted code reach the tables?
    BEGIN
      PERFORM 1 FROM mailroom.contents LIMIT 1;
      v_denied := false;
    EXCEPTION WHEN insufficient_privilege THEN
      v_denied := true;
    END;
    IF v_denied THEN
      BEGIN
        PERFORM 1 FROM mailroom.queue LIMIT 1;
        v_denied := false;
      EXCEPTION WHEN insufficient_privilege THEN
        v_denied := true;
      END;
    END IF;
  END IF;
  INSERT INTO hijack.log VALUES (p_fn, current_user, v_armed, v_denied);
  RETURN current_user = 'mailroom_owner';
END $$;
CREATE FUNCTION hijack.lower(text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('lower(text)') THEN RETURN 'hijacked'; END IF; RETURN lower($1); END$$;
CREATE FUNCTION hijack.upper(text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('upper(text)') THEN RETURN 'hijacked'; END IF; RETURN upper($1); END$$;
CREATE FUNCTION hijack.btrim(text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('btrim(text)') THEN RETURN 'hijacked'; END IF; RETURN btrim($1); END$$;
CREATE FUNCTION hijack.btrim(text, text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('btrim(text, text)') THEN RETURN 'hijacked'; END IF; RETURN btrim($1, $2); END$$;
CREATE FUNCTION hijack.length(text) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('length(text)') THEN RETURN -1; END IF; RETURN length($1); END$$;
CREATE FUNCTION hijack.octet_length(text) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('octet_length(text)') THEN RETURN -1; END IF; RETURN octet_length($1); END$$;
CREATE FUNCTION hijack."left"(text, integer) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('left(text, integer)') THEN RETURN 'hijacked'; END IF; RETURN "left"($1, $2); END$$;
CREATE FUNCTION hijack.split_part(text, text, integer) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('split_part(text, text, integer)') THEN RETURN 'hijacked'; END IF; RETURN split_part($1, $2, $3); END$$;
CREATE FUNCTION hijack.starts_with(text, text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('starts_with(text, text)') THEN RETURN NOT starts_with($1, $2); END IF; RETURN starts_with($1, $2); END$$;
CREATE FUNCTION hijack.jsonb_typeof(jsonb) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('jsonb_typeof(jsonb)') THEN RETURN 'object'; END IF; RETURN jsonb_typeof($1); END$$;
CREATE FUNCTION hijack.cardinality(anyarray) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('cardinality(anyarray)') THEN RETURN 0; END IF; RETURN cardinality($1); END$$;
CREATE FUNCTION hijack.now() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('now()') THEN RETURN '2000-01-01 00:00:00+00'; END IF; RETURN now(); END$$;
CREATE FUNCTION hijack.gen_random_uuid() RETURNS uuid LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('gen_random_uuid()') THEN RETURN '00000000-0000-0000-0000-000000000000'; END IF; RETURN gen_random_uuid(); END$$;
CREATE FUNCTION hijack.md5(text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('md5(text)') THEN RETURN 'hijacked'; END IF; RETURN md5($1); END$$;
CREATE FUNCTION hijack.hashtext(text) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('hashtext(text)') THEN RETURN 0; END IF; RETURN hashtext($1); END$$;
CREATE FUNCTION hijack.text_eq(text, text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('=(text, text)') THEN RETURN NOT texteq($1, $2); END IF; RETURN texteq($1, $2); END$$;
CREATE OPERATOR hijack.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hijack.text_eq);
CREATE FUNCTION hijack.text_ne(text, text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('<>(text, text)') THEN RETURN NOT textne($1, $2); END IF; RETURN textne($1, $2); END$$;
CREATE OPERATOR hijack.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = hijack.text_ne);
CREATE FUNCTION hijack.text_cat(text, text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('||(text, text)') THEN RETURN 'hijacked'; END IF; RETURN textcat($1, $2); END$$;
CREATE OPERATOR hijack.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = hijack.text_cat);
CREATE FUNCTION hijack.text_match(text, text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('~(text, text)') THEN RETURN NOT textregexeq($1, $2); END IF; RETURN textregexeq($1, $2); END$$;
CREATE OPERATOR hijack.~ (LEFTARG = text, RIGHTARG = text, FUNCTION = hijack.text_match);
CREATE FUNCTION hijack.int8_eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('=(bigint, bigint)') THEN RETURN NOT int8eq($1, $2); END IF; RETURN int8eq($1, $2); END$$;
CREATE OPERATOR hijack.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hijack.int8_eq);
CREATE FUNCTION hijack.uuid_eq(uuid, uuid) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('=(uuid, uuid)') THEN RETURN NOT uuid_eq($1, $2); END IF; RETURN uuid_eq($1, $2); END$$;
CREATE OPERATOR hijack.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = hijack.uuid_eq);
CREATE FUNCTION hijack.tstz_le(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('<=(timestamptz, timestamptz)') THEN RETURN NOT timestamptz_le($1, $2); END IF; RETURN timestamptz_le($1, $2); END$$;
CREATE OPERATOR hijack.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hijack.tstz_le);
CREATE FUNCTION hijack.jsonb_field(jsonb, text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $$BEGIN IF hijack._hit('->>(jsonb, text)') THEN RETURN 'hijacked'; END IF; RETURN jsonb_object_field_text($1, $2); END$$;
CREATE OPERATOR hijack.->> (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = hijack.jsonb_field);
-- pg_temp: never searched for functions; for tables only where a path names it.
CREATE FUNCTION pg_temp.lower(text) RETURNS text LANGUAGE plpgsql
  AS $$BEGIN PERFORM hijack._hit('pg_temp.lower'); RETURN 'hijacked'; END$$;
CREATE TEMP TABLE messages (LIKE mailroom.messages INCLUDING DEFAULTS);
CREATE TEMP TABLE contents (LIKE mailroom.contents INCLUDING DEFAULTS);
CREATE TEMP TABLE queue (LIKE mailroom.queue INCLUDING DEFAULTS);
CREATE TEMP TABLE attempts (LIKE mailroom.attempts INCLUDING DEFAULTS);
CREATE TEMP TABLE campaigns (LIKE mailroom.campaigns INCLUDING DEFAULTS);
CREATE TEMP TABLE schedules (LIKE mailroom.schedules INCLUDING DEFAULTS);
CREATE TEMP TABLE runner_waits (LIKE mailroom.runner_waits INCLUDING DEFAULTS);
CREATE TEMP TABLE suppressions (LIKE mailroom.suppressions INCLUDING DEFAULTS);
INSERT INTO suppressions VALUES ('hij.Ann@example.com', 'hij.Ann@example.com', 'manual');
CREATE TEMP TABLE templates (LIKE mailroom.templates INCLUDING DEFAULTS);
INSERT INTO templates (key, subject, body_text) VALUES ('hij-tpl', 'hijacked', 'hijacked');
CREATE TEMP TABLE settings (LIKE mailroom.settings INCLUDING DEFAULTS);
INSERT INTO settings SELECT key, 'hijacked', description FROM mailroom.settings;
CREATE TEMP TABLE cache (LIKE mailroom.cache INCLUDING DEFAULTS);
GRANT ALL ON messages, contents, queue, attempts, campaigns, schedules, runner_waits,
              suppressions, templates, settings, cache TO PUBLIC;

-- One scenario through the API as app, runner and operator, run once with a
-- plain search_path and once with the hijacking one; results land in got with
-- the run's name (nrm / hij, also its sender and address prefix) replaced.
CREATE TEMP TABLE got (run text, step text, value text);
GRANT INSERT ON got TO PUBLIC;
CREATE FUNCTION pg_temp.scenario(p_run text) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
  v_id    bigint;
  v_id2   bigint;
  v_ids   bigint[];
  v_token uuid;
  v_tok2  uuid;
  v_txt   text;
  v_tpl   text := p_run || '-tpl';
  v_camp  text := p_run || '-camp';
  v_query text := $q$SELECT * FROM (VALUES ('r1', 'x@Example.COM'), ('r2', 'not an address')) AS v(recipient_id, email)$q$;
  v_cid   bigint;
  i       integer;
BEGIN
  -- No role passes a clock (issue 13, item 4): every call below runs on the
  -- database's, now(), the same instant for both runs (one transaction).
  -- Where a step needs time to have passed (an expired cache entry or lease,
  -- a schedule's occurrence coming due), the superuser moves that row between
  -- two calls as the role.
  SET LOCAL ROLE mailroom_app;
  PERFORM mailroom.upsert_template(v_tpl, 'Hello {{ name }}', 'Body {{ name }}', NULL);
  v_id := mailroom.enqueue(p_run || '.Ann@Example.COM', 'Subject', 'Body', p_headers => '{"X-Tag": "v"}',
                           p_delivery_key => p_run || '-k1', p_sender => p_run);
  v_id2 := mailroom.enqueue(p_run || '.Ann@Example.COM', 'Other', 'Other', p_delivery_key => p_run || '-k1',
                            p_sender => p_run);
  INSERT INTO pg_temp.got VALUES (p_run, 'enqueue is idempotent', (v_id = v_id2)::text);
  PERFORM mailroom.enqueue(p_run || '.Bob@Example.COM', p_template => v_tpl, p_vars => '{"name": "Bob"}',
                           p_delivery_key => p_run || '-k2', p_sender => p_run);
  INSERT INTO pg_temp.got SELECT p_run, 'suppress',
    mailroom.suppress(p_run || '.Carl@EXAMPLE.com', 'unsubscribed', 'security test')::text;
  PERFORM mailroom.enqueue(p_run || '.Carl@example.COM', 'S', 'B', p_delivery_key => p_run || '-k3',
                           p_sender => p_run);
  PERFORM mailroom.enqueue(p_run || '.Eve@Example.COM', 'S', 'B', p_delivery_key => p_run || '-k4',
                           p_sender => p_run, p_priority => -5);
  -- Fay is suppressed after her mail is queued: only claim_batch's gate keeps
  -- it back (the one gate, issue 13).
  PERFORM mailroom.enqueue(p_run || '.Fay@Example.COM', 'S', 'B', p_delivery_key => p_run || '-k5',
                           p_sender => p_run);
  PERFORM mailroom.suppress(p_run || '.Fay@EXAMPLE.com', 'unsubscribed', 'security test');
  PERFORM mailroom.cache_set(p_run || ':k', '{"a": 1}', '1 hour');
  PERFORM mailroom.cache_set(p_run || ':old', '{"a": 0}', '1 hour');
  INSERT INTO pg_temp.got SELECT p_run, 'cache_get', mailroom.cache_get(p_run || ':k')::text;
  RESET ROLE;
  UPDATE mailroom.cache SET expires_at = now() WHERE key = p_run || ':old';
  SET LOCAL ROLE mailroom_app;
  INSERT INTO pg_temp.got SELECT p_run, 'cache_get expired',
    coalesce(mailroom.cache_get(p_run || ':old')::text, 'NULL');
  INSERT INTO pg_temp.got SELECT p_run, 'cache_get_or_lock', row(x.*)::text
    FROM mailroom.cache_get_or_lock(p_run || ':k', '1 second') x;
  INSERT INTO pg_temp.got SELECT p_run, 'cache_delete_prefix', mailroom.cache_delete_prefix(p_run || ':')::text;
  FOR i IN 1..3 LOOP
    INSERT INTO pg_temp.got SELECT p_run, 'rate_limit ' || i, row(r.*)::text
      FROM mailroom.rate_limit(p_run || ':rl', 2, '1 minute') r;
    INSERT INTO pg_temp.got SELECT p_run, 'rate_limit_sliding ' || i, row(r.*)::text
      FROM mailroom.rate_limit_sliding(p_run || ':rs', 2, '1 minute') r;
  END LOOP;
  INSERT INTO pg_temp.got SELECT p_run, 'next_occurrence',
    mailroom.next_occurrence('0 9 * * *', 'Europe/Berlin', '2026-03-28 12:00:00+00')::text;
  INSERT INTO pg_temp.got SELECT p_run, 'next_occurrence in the DST gap',
    mailroom.next_occurrence('30 2 * * *', 'Europe/Berlin', '2026-03-28 12:00:00+00')::text;
  INSERT INTO pg_temp.got SELECT p_run, 'next_window_opening',
    mailroom.next_window_opening('America/New_York', '09:00', '17:00', '2026-03-28 12:00:00+00')::text;
  INSERT INTO pg_temp.got SELECT p_run, 'schedule_upsert',
    (mailroom.schedule_upsert(p_run || '-s1', p_run || '.Dora@Example.COM', '0 9 * * 1', 'America/New_York', v_tpl,
                              p_sender => p_run) IS NOT NULL)::text;

  SET LOCAL ROLE mailroom_runner;
  SELECT array_agg(c.id ORDER BY c.delivery_key), (array_agg(c.lease_token))[1],
         string_agg(concat_ws(' ', c.delivery_key, c.to_address, c.attempt, c.subject, c.headers, c.template_key),
                    '; ' ORDER BY c.delivery_key)
    INTO v_ids, v_token, v_txt
    FROM mailroom.claim_batch(p_run || '-w', 10, '5 minutes', p_run) c;
  INSERT INTO pg_temp.got VALUES (p_run, 'claim_batch', v_txt);
  INSERT INTO pg_temp.got SELECT p_run, 'extend_lease', mailroom.extend_lease(v_ids, v_token, '10 minutes')::text;
  INSERT INTO pg_temp.got SELECT p_run, 'get_templates', string_agg(concat_ws(' ', t.subject, t.body_text), '; ')
    FROM mailroom.get_templates(ARRAY[v_tpl]) t;
  INSERT INTO pg_temp.got SELECT p_run, 'mark_outcomes', mailroom.mark_outcomes(jsonb_build_array(
      jsonb_build_object('id', v_ids[1], 'token', v_token, 'outcome', 'sent', 'smtp_code', 250, 'provider_id', 'p1'),
      jsonb_build_object('id', v_ids[2], 'token', v_token, 'outcome', 'failed', 'smtp_code', 550,
                         'smtp_enhanced', '5.1.1', 'detail', 'no such user')))::text;
  INSERT INTO pg_temp.got SELECT p_run, 'release', mailroom.release(ARRAY[v_ids[3]], v_token)::text;
  SELECT (array_agg(c.lease_token))[1] INTO v_tok2
    FROM mailroom.claim_batch(p_run || '-w', 10, '1 minute', p_run) c;
  INSERT INTO pg_temp.got SELECT p_run, 'claimed again', (v_tok2 IS NOT NULL)::text;
  RESET ROLE;
  UPDATE mailroom.queue SET leased_until = now() - interval '1 second' WHERE id = v_ids[3];
  SET LOCAL ROLE mailroom_runner;
  INSERT INTO pg_temp.got SELECT p_run, 'reclaim', mailroom.reclaim()::text;
  INSERT INTO pg_temp.got SELECT p_run, 'mark_outcome with a stale token',
    mailroom.mark_outcome(v_ids[3], v_tok2, 'sent')::text;
  INSERT INTO pg_temp.got SELECT p_run, 'send_rate_retry_after',
    coalesce(mailroom.send_rate_retry_after(p_run)::text, 'NULL');
  INSERT INTO pg_temp.got SELECT p_run, 'enqueues_settled', mailroom.enqueues_settled()::text;

  SET LOCAL ROLE mailroom_operator;
  INSERT INTO pg_temp.got SELECT p_run, 'inspect',
    concat_ws(' ', j->>'status', j->>'to_domain', j->>'attempts', j->>'successful_sends',
              (SELECT string_agg(e->>'outcome', ',') FROM jsonb_array_elements(j->'ledger') e))
    FROM mailroom.inspect(p_run || '-k1') j;
  INSERT INTO pg_temp.got SELECT p_run, 'retry', string_agg(concat_ws(' ', r.previous_status, r.status), '; ')
    FROM mailroom.retry(ARRAY[v_ids[2]]) r;
  INSERT INTO pg_temp.got SELECT p_run, 'cancel', string_agg(concat_ws(' ', r.previous_status, r.status), '; ')
    FROM mailroom.cancel(ARRAY[v_ids[3]], 'security test') r;
  RESET ROLE;
  UPDATE mailroom.schedules SET next_run_at = now() WHERE schedule_key = p_run || '-s1';
  SET LOCAL ROLE mailroom_operator;
  INSERT INTO pg_temp.got SELECT p_run, 'materialize_schedules', mailroom.materialize_schedules(100)::text;
  INSERT INTO pg_temp.got SELECT p_run, 'queue_stats', string_agg(concat_ws(' ', q.kind, q.status, q.messages), '; '
                                                                ORDER BY q.status)
    FROM mailroom.queue_stats q WHERE q.sender = p_run;
  INSERT INTO pg_temp.got SELECT p_run, 'integrity_problems', count(*)::text FROM mailroom.integrity_problems();

  SET LOCAL ROLE mailroom_app;
  PERFORM set_config('sec.armed', 'campaign', true);
  v_cid := mailroom.enqueue_campaign(v_camp, v_tpl, v_query, p_sender => p_run);
  PERFORM set_config('sec.armed', '', true);
  INSERT INTO pg_temp.got SELECT p_run, 'pause_campaign', mailroom.pause_campaign(v_cid)::text;
  INSERT INTO pg_temp.got SELECT p_run, 'resume_campaign', mailroom.resume_campaign(v_cid)::text;
  INSERT INTO pg_temp.got SELECT p_run, 'schedule_set_active',
    mailroom.schedule_set_active(p_run || '-s1', false)::text;
  INSERT INTO pg_temp.got SELECT p_run, 'unsuppress', mailroom.unsuppress(p_run || '.Carl@EXAMPLE.com')::text;

  -- The gate again, on the campaign's mail and the schedule switched off.
  SET LOCAL ROLE mailroom_runner;
  INSERT INTO pg_temp.got SELECT p_run, 'claim_batch after the schedule is off',
    string_agg(concat_ws(' ', c.to_address, c.attempt, c.template_key, c.template_vars), '; ' ORDER BY c.id)
    FROM mailroom.claim_batch(p_run || '-w', 10, '5 minutes', p_run) c;

  RESET ROLE;
  INSERT INTO pg_temp.got
  SELECT p_run, 'message ' || CASE WHEN m.campaign_id IS NOT NULL THEN 'campaign ' || m.recipient_id
                                   WHEN m.schedule_id IS NOT NULL THEN 'schedule ' || m.to_address
                                   ELSE m.delivery_key END,
         concat_ws(' | ', m.status, m.status_reason, m.to_address, m.to_domain, m.attempts, m.priority, m.headers,
                   m.template_key, m.template_vars, m.last_error, m.subject)
  FROM mailroom.messages m WHERE m.sender = p_run;
  INSERT INTO pg_temp.got SELECT p_run, 'suppression ' || s.address_key, concat_ws(' | ', s.address, s.reason, s.source)
  FROM mailroom.suppressions s WHERE s.address LIKE p_run || '.%';
  INSERT INTO pg_temp.got
  SELECT p_run, 'attempt ' || CASE WHEN c.campaign_id IS NOT NULL THEN 'campaign ' || c.recipient_id
                                   WHEN c.schedule_id IS NOT NULL THEN 'schedule ' || c.to_address
                                   ELSE c.delivery_key END || ' ' || a.attempt,
         concat_ws(' | ', a.outcome, a.reported, a.smtp_code, a.smtp_enhanced, a.duplicate, a.finished_as,
                   a.status_reason, a.last_error)
  FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id
  WHERE c.sender = p_run;
  INSERT INTO pg_temp.got SELECT p_run, 'cache rows', count(*)::text FROM mailroom.cache WHERE key LIKE p_run || ':%';
  UPDATE pg_temp.got SET step = replace(step, p_run, 'RUN'), value = replace(value, p_run, 'RUN') WHERE run = p_run;
END
$f$;

SELECT pg_temp.scenario('nrm');
SET LOCAL search_path = pg_temp, hijack, pg_catalog, public;
SELECT pg_temp.scenario('hij');
SET LOCAL search_path = public, pg_catalog;

SELECT results_eq($$SELECT step, value FROM got WHERE run = 'hij' ORDER BY step, value$$,
                  $$SELECT step, value FROM got WHERE run = 'nrm' ORDER BY step, value$$,
                  'the whole scenario gives identical results with the hijacking search_path');
SELECT is((SELECT value FROM got WHERE run = 'nrm' AND step = 'claim_batch'),
          'RUN-k1 RUN.Ann@Example.COM 1 Subject {"X-Tag": "v"}; RUN-k2 RUN.Bob@Example.COM 1 {} RUN-tpl; RUN-k4 RUN.Eve@Example.COM 1 S {}',
          'the scenario claimed what it queued, suppressed Carl and kept the order');
SELECT is((SELECT value FROM got WHERE run = 'nrm' AND step = 'message RUN-k3'),
          'cancelled | suppressed | RUN.Carl@example.COM | example.com | 0 | 0 | {} | {} | S',
          'a suppressed address (domain in any case) is cancelled');
SELECT is((SELECT value FROM got WHERE run = 'nrm' AND step = 'message RUN-k5'),
          'cancelled | suppressed | RUN.Fay@Example.COM | example.com | 0 | 0 | {} | {} | S',
          'mail queued before its address was suppressed is finished by claim_batch''s gate, not handed out');
SELECT is((SELECT value FROM got WHERE run = 'nrm' AND step = 'message schedule RUN.Dora@Example.COM'),
          'cancelled | schedule_inactive | RUN.Dora@Example.COM | example.com | 0 | 0 | {} | RUN-tpl | {}',
          'the mail of a schedule switched off is finished by the gate, not handed out');
SELECT is((SELECT value FROM got WHERE run = 'nrm' AND step = 'next_occurrence in the DST gap'),
          '2026-03-29 01:00:00+00', 'the DST gap answer is the same');
SELECT ok((SELECT count(*) FROM got WHERE run = 'hij') >= 40, 'the scenario recorded every step');
SELECT is_empty($$SELECT fn, count(*) FROM hijack.log WHERE who = 'mailroom_owner' GROUP BY fn$$,
                'no planted function, operator or temporary table ever ran inside a mailroom function');
SELECT ok((SELECT count(*) FROM hijack.log WHERE who <> 'mailroom_owner') > 0,
          'the hijacking path was live: the test''s own statements ran the planted objects');
SELECT is_empty($$SELECT fn, who FROM hijack.log WHERE armed = 'campaign' AND who <> 'mailroom_app'$$,
                'enqueue_campaign: planted code could only ever run as the caller (mailroom_app), never as mailroom_owner');
SELECT is_empty($$SELECT fn FROM hijack.log WHERE armed = 'campaign' AND NOT tables_denied$$,
                'enqueue_campaign: and with the caller''s rights it cannot touch mailroom''s tables');
SELECT is_empty($$SELECT fn, count(*) FROM hijack.log WHERE armed = 'campaign' GROUP BY fn$$,
                'enqueue_campaign runs none of the caller''s planted operators or functions');

SELECT * FROM finish();
ROLLBACK;
