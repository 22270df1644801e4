-- pgTAP: mailroom.enqueue_campaign — one INSERT ... SELECT from a query run with the caller's rights.
BEGIN;
SELECT plan(37);
SET LOCAL timezone = 'UTC';

SELECT has_function('mailroom', 'enqueue_campaign', ARRAY['text', 'text', 'text', 'integer', 'timestamp with time zone',
  'jsonb', 'text', 'time without time zone', 'time without time zone', 'text', 'jsonb', 'integer', 'text', 'text'], 'enqueue_campaign exists');
SELECT isnt_definer('mailroom', 'enqueue_campaign', ARRAY['text', 'text', 'text', 'integer', 'timestamp with time zone',
  'jsonb', 'text', 'time without time zone', 'time without time zone', 'text', 'jsonb', 'integer', 'text', 'text'], 'enqueue_campaign is SECURITY INVOKER: the recipients query runs as the caller');
SELECT function_privs_are('mailroom', 'enqueue_campaign', ARRAY['text', 'text', 'text', 'integer', 'timestamp with time zone',
  'jsonb', 'text', 'time without time zone', 'time without time zone', 'text', 'jsonb', 'integer', 'text', 'text'], 'mailroom_app', ARRAY['EXECUTE'], 'mailroom_app may call it');
SELECT is_definer('mailroom', '_campaign_fill', ARRAY['bigint'], 'the writing step is SECURITY DEFINER');
SELECT hasnt_function('mailroom', '_campaign_fill', ARRAY['bigint', 'timestamp with time zone'], 'no p_now on anything the app executes');

-- the application's own table, readable by the app role only
CREATE TABLE public.t_users (id int PRIMARY KEY, email text, tz text);
INSERT INTO public.t_users VALUES
  (1, 'ann@Example.org', 'Europe/Berlin'), (2, 'bob@example.org', 'America/New_York'),
  (3, 'cy@example.org', NULL), (4, 'dee@example.org', NULL), (5, 'not an address', NULL);
GRANT SELECT ON public.t_users TO mailroom_app;
SELECT mailroom.upsert_template('news', 'News', 'Hello {{ name }}');
INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('dee@example.org', 'dee@EXAMPLE.org', 'unsubscribed');

SET ROLE mailroom_app;
CREATE TEMP TABLE ids AS
SELECT mailroom.enqueue_campaign('spring', 'news',
  'SELECT id AS recipient_id, email, jsonb_build_object(''n'', id) AS vars FROM public.t_users;',
  p_priority => 10, p_vars => '{"name": "friend", "n": 0}', p_send_at => '2026-05-01 09:00Z') AS id;
SELECT isnt((SELECT id FROM ids), NULL, 'a campaign id comes back');
RESET ROLE;

SELECT results_eq($$SELECT recipient_id, to_address, status, coalesce(status_reason, '-'), priority::int, run_at
                    FROM mailroom.messages WHERE campaign_id = (SELECT id FROM ids) ORDER BY recipient_id$$,
  $$VALUES ('1', 'ann@Example.org', 'queued', '-', 10, '2026-05-01 09:00Z'::timestamptz),
           ('2', 'bob@example.org', 'queued', '-', 10, '2026-05-01 09:00Z'),
           ('3', 'cy@example.org', 'queued', '-', 10, '2026-05-01 09:00Z'),
           ('4', 'dee@example.org', 'cancelled', 'suppressed', 10, NULL),
           ('5', 'not an address', 'cancelled', 'invalid_address', 10, NULL)$$,
  'one message per recipient, address snapshotted; suppressed and malformed addresses kept as cancelled');
SELECT results_eq($$SELECT c.recipient_id, q.status, f.outcome, f.finished_as, f.status_reason
                    FROM mailroom.contents c LEFT JOIN mailroom.queue q ON q.id = c.id
                    LEFT JOIN mailroom.attempts f ON f.message_id = c.id
                    WHERE c.campaign_id = (SELECT id FROM ids) ORDER BY 1$$,
  $$VALUES ('1', 'queued', NULL, NULL, NULL), ('2', 'queued', NULL, NULL, NULL), ('3', 'queued', NULL, NULL, NULL),
           ('4', NULL, 'cancelled', 'cancelled', 'suppressed'), ('5', NULL, 'cancelled', 'cancelled', 'invalid_address')$$,
  'live mail has a queue row, the cancelled ones a finishing ledger row instead (never both)');
SELECT is((SELECT template_vars FROM mailroom.messages WHERE delivery_key = 'campaign:' || (SELECT id FROM ids) || ':2'),
  '{"name": "friend", "n": 2}'::jsonb, 'recipient vars override the campaign vars; delivery key campaign:<id>:<recipient>');
SELECT is((SELECT template_key FROM mailroom.messages WHERE recipient_id = '1'), 'news', 'the template is referenced, rendered by the runner');

-- a re-run adds nobody twice; a new recipient is added
SET ROLE mailroom_app;
SELECT is(mailroom.enqueue_campaign('spring', 'news', 'SELECT id AS recipient_id, email FROM public.t_users'),
  (SELECT id FROM ids), 're-running returns the same campaign');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE campaign_id = (SELECT id FROM ids)), 5, 're-running adds 0 rows');
INSERT INTO public.t_users VALUES (6, 'eve@example.org', NULL);
SET ROLE mailroom_app;
SELECT mailroom.enqueue_campaign('spring', 'news', 'SELECT id AS recipient_id, email FROM public.t_users');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.messages WHERE campaign_id = (SELECT id FROM ids)), 6, 'a new recipient is added once');

-- send window in each recipient's zone (default zone for the others)
SET ROLE mailroom_app;
SELECT mailroom.enqueue_campaign('windowed', 'news', 'SELECT id AS recipient_id, email, tz AS time_zone FROM public.t_users WHERE id <= 3',
  p_send_at => '2099-07-01 04:00Z', p_window_start => '08:00', p_window_end => '20:00', p_time_zone => 'Asia/Kolkata');
RESET ROLE;
SELECT results_eq($$SELECT recipient_id, run_at, recipient_zone FROM mailroom.messages m
                    JOIN mailroom.campaigns c ON c.id = m.campaign_id WHERE c.name = 'windowed' ORDER BY 1$$,
  $$VALUES ('1', '2099-07-01 06:00Z'::timestamptz, 'Europe/Berlin'),
           ('2', '2099-07-01 12:00Z'::timestamptz, 'America/New_York'),
           ('3', '2099-07-01 04:00Z'::timestamptz, 'Asia/Kolkata')$$,
  'due 04:00 UTC: Berlin waits for 08:00 CEST, New York for 08:00 EDT, Kolkata (09:30) is open');

-- enqueue into a paused campaign holds the new mail
SELECT mailroom.pause_campaign((SELECT id FROM ids));
INSERT INTO public.t_users VALUES (7, 'fay@example.org', NULL);
SET ROLE mailroom_app;
SELECT mailroom.enqueue_campaign('spring', 'news', 'SELECT id AS recipient_id, email FROM public.t_users');
RESET ROLE;
SELECT is((SELECT status FROM mailroom.messages WHERE recipient_id = '7'), 'paused', 'mail added to a paused campaign is paused');

-- collisions take the conflict-tolerant path: a recipient twice in the query,
-- a delivery key already used by enqueue(); the rest is written, once
SET ROLE mailroom_app;
CREATE TEMP TABLE twice AS
SELECT mailroom.enqueue_campaign('twice', 'news', 'SELECT id AS recipient_id, email FROM public.t_users WHERE false') AS id;
SELECT mailroom.enqueue('taken@example.org', 'Hi', 'Body', p_delivery_key => 'campaign:' || (SELECT id FROM twice) || ':2');
SELECT lives_ok($$SELECT mailroom.enqueue_campaign('twice', 'news',
  'SELECT id AS recipient_id, email FROM public.t_users WHERE id <= 3 UNION ALL SELECT 1, ''ann@Example.org''')$$,
  'a recipient twice in the query and a delivery key already taken do not fail the campaign');
RESET ROLE;
SELECT results_eq($$SELECT recipient_id FROM mailroom.messages WHERE campaign_id = (SELECT id FROM twice) ORDER BY 1$$,
  $$VALUES ('1'), ('3')$$,
  'recipient 1 once; recipient 2 skipped (its delivery key exists), recipient 3 added');
SELECT is((SELECT to_address FROM mailroom.messages WHERE delivery_key = 'campaign:' || (SELECT id FROM twice) || ':2'),
  'taken@example.org', 'the message that held the key is untouched');
SET ROLE mailroom_app;
SELECT is(mailroom.enqueue_campaign('twice', 'news', 'SELECT id AS recipient_id, email FROM public.t_users WHERE id <= 3'),
  (SELECT id FROM twice), 'a re-run over the taken key fails nothing either');
RESET ROLE;

-- the query runs with the caller's rights, never mailroom's
SET ROLE mailroom_app;
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('steal', 'news', 'SELECT id::text AS recipient_id, to_address AS email FROM mailroom.contents')$$,
  '42501', 'mailroom: recipients: the query does not run: permission denied for table contents',
  'a query reading mailroom''s tables fails: it runs as the caller');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('steal', 'news', 'WITH d AS (DELETE FROM mailroom.suppressions RETURNING address) SELECT address AS recipient_id, address AS email FROM d')$$,
  '0A000', 'mailroom: recipients: the query does not run: WITH clause containing a data-modifying statement must be at the top level',
  'a data-modifying query is refused (it is wrapped as a subquery)');
SELECT throws_ok($$SELECT mailroom._campaign_fill(1)$$, '55000',
  'mailroom: recipients: no staged recipients (call enqueue_campaign)', 'the writing step alone has nothing to read');
SELECT throws_ok($$INSERT INTO mailroom.queue (id, sender, max_attempts, on_ambiguous) VALUES (1, 'default', 5, 'retry')$$,
  '42501', NULL, 'the app role cannot write the queue directly');

-- bad input: nothing written
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('', 'news', 'SELECT id AS recipient_id, email FROM public.t_users')$$,
  '22023', 'mailroom: name: a campaign needs a name', 'empty campaign name');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'nope', 'SELECT id AS recipient_id, email FROM public.t_users')$$,
  '22023', 'mailroom: template: no template named "nope"', 'unknown template');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT id AS recipient_id, email AS address FROM public.t_users')$$,
  '22023', 'mailroom: recipients: the query must return columns recipient_id and email, it returns recipient_id, address',
  'query without an email column');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT id AS recipient_id, email, tz FROM public.t_users')$$,
  '22023', 'mailroom: recipients: unexpected column(s) tz', 'query with an unexpected column');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT id AS recipient_id, email, id AS vars FROM public.t_users')$$,
  '22023', 'mailroom: recipients: column vars must be json or jsonb, not integer', 'vars of the wrong type');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT id AS recipient_id, email FRM public.t_users')$$,
  '42601', 'mailroom: recipients: the query does not run: syntax error at or near "public"', 'a query that does not parse');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', '  ')$$,
  '22023', 'mailroom: recipients: a query returning recipient_id, email [, vars] [, time_zone] is required', 'no query');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT id AS recipient_id, email FROM public.t_users', p_window_start => '09:00', p_window_end => '09:00')$$,
  '22023', 'mailroom: window_end: must differ from window_start (09:00:00), an empty window never opens', 'window end equal to start');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT id AS recipient_id, email FROM public.t_users', p_time_zone => 'Europe/Berlín')$$,
  '22023', 'mailroom: time_zone: "Europe/Berlín" is not a known IANA time zone', 'unknown default zone');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT 1 AS recipient_id, ''a@b.org'' AS email, ''Mars/Base'' AS time_zone')$$,
  '22023', 'mailroom: recipients.time_zone: "Mars/Base" is not a known IANA time zone', 'unknown recipient zone');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT 9 AS recipient_id, NULL::text AS email')$$,
  '22023', 'mailroom: recipients: email of recipient "9" is NULL', 'a recipient without an address');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('x', 'news', 'SELECT id AS recipient_id, email FROM public.t_users', p_priority => 101)$$,
  '22023', 'mailroom: priority: must be between -100 and 100, got 101', 'priority out of range');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.campaigns), 3, 'no campaign was written by the bad calls');
SELECT is((SELECT count(*)::int FROM mailroom.messages), 13, 'no message was written by the bad calls');

SELECT * FROM finish();
ROLLBACK;
