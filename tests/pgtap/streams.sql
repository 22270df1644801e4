-- pgTAP: message streams and suppression scopes (issue 15). A suppression for
-- one stream stops only that stream's mail at claim_batch's gate; one for all
-- streams (stream NULL: bounces, operator decisions, every suppression older
-- than streams) stops everything. The write-time shortcuts (enqueue,
-- enqueue_campaign) honour the scope the same way.
BEGIN;
SELECT plan(37);

-- contract
SELECT has_table('mailroom', 'streams', 'streams exists');
SELECT results_eq($$SELECT name, unsubscribe_headers FROM mailroom.streams ORDER BY name$$,
  $$VALUES ('broadcast', true), ('transactional', false)$$, 'seeded: broadcast carries unsubscribe headers, transactional does not');
SELECT col_not_null('mailroom', 'contents', 'stream', 'every mail has a stream');
SELECT col_is_null('mailroom', 'suppressions', 'stream', 'a suppression''s stream may be NULL (all streams)');
SELECT col_default_is('mailroom', 'schedules', 'stream', 'broadcast', 'schedules default to broadcast');
SELECT function_privs_are('mailroom', 'define_stream', ARRAY['text', 'boolean', 'text'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators define streams');
SELECT function_privs_are('mailroom', 'define_stream', ARRAY['text', 'boolean', 'text'], 'mailroom_app', ARRAY[]::text[], 'applications do not');
SELECT function_privs_are('mailroom', 'stream_settings', ARRAY[]::text[], 'mailroom_runner', ARRAY['EXECUTE'], 'runners read the stream settings');

-- defaults: enqueue transactional, enqueue_campaign broadcast, p_stream chooses
SELECT mailroom.upsert_template('news', 'News', 'Hello');
CREATE TEMP TABLE spring AS
SELECT mailroom.enqueue_campaign('spring', 'news', 'SELECT 1 AS recipient_id, ''ann@example.org'' AS email') AS id;
CREATE TEMP TABLE m AS
SELECT 'tx' AS k, mailroom.enqueue('ann@example.org', 'Reset', 'B') AS id
UNION ALL SELECT 'bc', mailroom.enqueue('ann@example.org', 'Letter', 'B', p_stream => 'broadcast')
UNION ALL SELECT 'camp', (SELECT c.id FROM mailroom.contents c WHERE c.campaign_id = (SELECT id FROM spring))
UNION ALL SELECT 'bob', mailroom.enqueue('bob@example.org', 'Reset', 'B');
SELECT results_eq($$SELECT m.k, c.stream FROM m JOIN mailroom.contents c USING (id) ORDER BY m.k$$,
  $$VALUES ('bc', 'broadcast'), ('bob', 'transactional'), ('camp', 'broadcast'), ('tx', 'transactional')$$,
  'enqueue defaults to transactional, campaigns to broadcast, p_stream chooses');
SELECT is((SELECT stream FROM mailroom.campaigns WHERE name = 'spring'), 'broadcast', 'the campaign records its stream');

-- a broadcast-only unsubscribe: the gate cancels the broadcast mail, hands out the transactional
SET ROLE mailroom_app;
SELECT is(mailroom.suppress('ann@Example.ORG', 'unsubscribed', 'prefs', 'broadcast'), 0, 'suppress for one stream');
SELECT is(mailroom.suppress('ann@example.org', 'unsubscribed', 'prefs again', 'broadcast'), 0, 'again: idempotent');
RESET ROLE;
SELECT results_eq($$SELECT address, stream, reason, source FROM mailroom.suppressions$$,
  $$VALUES ('ann@Example.ORG', 'broadcast', 'unsubscribed', 'prefs')$$, 'one row per address and scope; the first stays');
CREATE TEMP TABLE b AS SELECT * FROM mailroom._claim_batch('w', 10, p_now => now() + interval '1 second');
SELECT results_eq($$SELECT m.k, b.stream FROM b JOIN m USING (id) ORDER BY m.k$$,
  $$VALUES ('bob', 'transactional'), ('tx', 'transactional')$$,
  'the claim hands out the transactional mail and returns each mail''s stream');
SELECT results_eq($$SELECT m.k, x.status, x.status_reason FROM m JOIN mailroom.messages x USING (id) WHERE m.k IN ('bc', 'camp') ORDER BY m.k$$,
  $$VALUES ('bc', 'cancelled', 'suppressed'), ('camp', 'cancelled', 'suppressed')$$,
  'the broadcast mail to the address was cancelled by the gate');
CREATE TEMP TABLE late AS
SELECT mailroom.enqueue('ann@example.org', 'Later letter', 'B', p_stream => 'broadcast') AS bc,
       mailroom.enqueue('ann@example.org', 'Later reset', 'B') AS tx;
SELECT results_eq($$SELECT x.status FROM late JOIN mailroom.messages x ON x.id IN (late.bc, late.tx) ORDER BY x.id$$,
  $$VALUES ('cancelled'), ('queued')$$, 'enqueue''s shortcut honours the scope too');
SELECT lives_ok($$SELECT mailroom.enqueue_campaign('summer', 'news', 'SELECT 1 AS recipient_id, ''ann@example.org'' AS email')$$,
  'a later campaign to the address');
SELECT is((SELECT x.status_reason FROM mailroom.messages x JOIN mailroom.campaigns k ON k.id = x.campaign_id WHERE k.name = 'summer'),
  'suppressed', 'enqueue_campaign''s shortcut cancels its mail (broadcast)');
SELECT lives_ok($$SELECT mailroom.enqueue_campaign('receipts', 'news', 'SELECT 1 AS recipient_id, ''ann@example.org'' AS email',
                                                  p_stream => 'transactional')$$, 'a campaign of transactional mail');
SELECT is((SELECT x.status FROM mailroom.messages x JOIN mailroom.campaigns k ON k.id = x.campaign_id WHERE k.name = 'receipts'),
  'queued', '... is not held by a broadcast unsubscribe');

-- all streams: stops the transactional mail too; unsuppress by scope
SELECT is(mailroom.suppress('ann@example.org', 'manual'), 0, 'an all-streams suppression beside the broadcast one');
SELECT is((SELECT count(*)::int FROM mailroom.suppressions WHERE address_key = 'ann@example.org'), 2, 'two scopes, two rows');
SELECT is((SELECT mailroom.inspect(c.delivery_key) -> 'stream' || jsonb_path_query_array(mailroom.inspect(c.delivery_key),
                                          '$.suppressions[*] ? (@.stops_this_mail == true).stream')
           FROM late JOIN mailroom.contents c ON c.id = late.tx),
  '["transactional", null]'::jsonb, 'inspect shows the stream and which scope stops the mail (all streams, not broadcast)');
DELETE FROM b;
INSERT INTO b SELECT * FROM mailroom._claim_batch('w', 10, p_now => now() + interval '2 seconds');
SELECT is((SELECT count(*)::int FROM b), 0, 'nothing to ann is handed out now');
SELECT is((SELECT x.status_reason FROM late JOIN mailroom.messages x ON x.id = late.tx), 'suppressed',
  'the transactional mail was cancelled');
SELECT is(mailroom.unsuppress('ann@example.org', 'broadcast'), true, 'unsuppress one scope');
SELECT results_eq($$SELECT stream FROM mailroom.suppressions$$, $$VALUES (NULL::text)$$, 'the all-streams row stays');
SELECT is(mailroom.unsuppress('ann@example.org'), true, 'unsuppress with no stream lifts every scope');
SELECT is((SELECT count(*)::int FROM mailroom.suppressions), 0, 'none left');

-- schedules: broadcast by default, p_stream chooses, a changed stream replaces the queued mail
SELECT mailroom._schedule_upsert('digest:1', 'cy@example.org', '0 8 * * *', 'UTC', 'news', p_now => '2026-05-01 07:00Z');
SELECT mailroom._schedule_upsert('alarm:1', 'cy@example.org', '0 8 * * *', 'UTC', 'news', p_stream => 'transactional',
                                 p_now => '2026-05-01 07:00Z');
SELECT results_eq($$SELECT schedule_key, stream FROM mailroom.schedules ORDER BY 1$$,
  $$VALUES ('alarm:1', 'transactional'), ('digest:1', 'broadcast')$$, 'schedules default to broadcast; p_stream chooses');
SELECT is(mailroom._materialize_schedules(p_now => '2026-05-01 07:58Z'), 2, 'both materialize');
SELECT results_eq($$SELECT s.schedule_key, c.stream FROM mailroom.contents c JOIN mailroom.schedules s ON s.id = c.schedule_id ORDER BY 1$$,
  $$VALUES ('alarm:1', 'transactional'), ('digest:1', 'broadcast')$$, 'their mail has the schedule''s stream');
SELECT mailroom._schedule_upsert('digest:1', 'cy@example.org', '0 8 * * *', 'UTC', 'news', p_stream => 'transactional',
                                 p_now => '2026-05-01 07:59Z');
SELECT results_eq($$SELECT c.stream, x.status FROM mailroom.contents c JOIN mailroom.messages x USING (id)
                    JOIN mailroom.schedules s ON s.id = c.schedule_id WHERE s.schedule_key = 'digest:1' ORDER BY c.id$$,
  $$VALUES ('broadcast', 'cancelled'), ('transactional', 'queued')$$, 'a changed stream replaces the queued mail');

-- errors, and nothing written by them
SELECT throws_ok($$SELECT mailroom.suppress('ann@example.org', 'manual', NULL, 'newsletter')$$, '22023',
  'mailroom: stream: no stream named "newsletter"', 'suppress: unknown stream');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.org', 'S', 'B', p_stream => NULL)$$, '22023',
  'mailroom: stream: no stream named "NULL"', 'enqueue: no stream');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('spring', 'news', 'SELECT 2 AS recipient_id, ''cy@example.org'' AS email',
                                                   p_stream => 'transactional')$$, '22023',
  'mailroom: stream: campaign "spring" exists with stream "broadcast", not "transactional"', 'a campaign keeps its stream');
SELECT throws_ok($$SELECT mailroom.define_stream('Bad Name', true)$$, '22023',
  'mailroom: name: "Bad Name" is not a stream name (a lower-case letter, then letters, digits, _ or -, at most 40)', 'define_stream: bad name');

SELECT * FROM finish();
ROLLBACK;
