-- Tests for mailroom:record_feedback (and the tables it writes:
-- table_feedback_events, ledger_bounced). Mail is sent through the real
-- queue functions, then feedback arrives as it would after a relay took it.
BEGIN;
SELECT plan(46);
SET LOCAL client_min_messages = warning;

-- == Contract ================================================================
SELECT has_table('mailroom', 'feedback_events', 'feedback_events exists');
SELECT col_is_unique('mailroom', 'feedback_events', ARRAY['event_key'], 'one row per event_key');
SELECT has_function('mailroom', 'record_feedback', ARRAY['text', 'bigint', 'text', 'text', 'text', 'text', 'text'], 'record_feedback exists');
SELECT is_definer('mailroom', 'record_feedback', ARRAY['text', 'bigint', 'text', 'text', 'text', 'text', 'text'], 'SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'record_feedback', ARRAY['text', 'bigint', 'text', 'text', 'text', 'text', 'text'],
  'mailroom_feedback', ARRAY['EXECUTE'], 'the feedback role may record feedback');
SELECT function_privs_are('mailroom', 'record_feedback', ARRAY['text', 'bigint', 'text', 'text', 'text', 'text', 'text'],
  'mailroom_runner', ARRAY[]::text[], 'runners may not (they never need to)');
SELECT function_privs_are('mailroom', 'record_feedback', ARRAY['text', 'bigint', 'text', 'text', 'text', 'text', 'text'],
  'mailroom_app', ARRAY[]::text[], 'apps may not unless granted mailroom_feedback');

-- == Mail that left: sent, then later feedback ================================
SELECT mailroom.upsert_template('news', 'News', 'Hello');
CREATE TEMP TABLE camp AS SELECT mailroom.enqueue_campaign('spring', 'news',
  $$SELECT 1 AS recipient_id, 'dora@example.net' AS email$$) AS id;
SELECT mailroom.enqueue(k || '@example.com', 'Hi', 'B', p_delivery_key => k, p_sender => 'shop')
FROM unnest(ARRAY['ann', 'bob', 'cid', 'eve', 'fay']) AS k;
CREATE TEMP TABLE c AS SELECT * FROM mailroom.claim_batch('w1', 10, '5 minutes', NULL);
SELECT is(mailroom.mark_outcomes(
  (SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent', 'smtp_code', 250)) FROM c
   WHERE delivery_key IS DISTINCT FROM 'fay')), 5, 'five mails sent (fay stays leased)');
CREATE TEMP TABLE ids AS
  SELECT split_part(to_address, '@', 1) AS k, id FROM mailroom.contents;
GRANT SELECT ON ids TO PUBLIC;

SET ROLE mailroom_feedback;
SELECT is(mailroom.record_feedback('bounce', (SELECT id FROM ids WHERE k = 'ann'), 'ann@example.com', '5.1.1',
                                   'smtp; 550 5.1.1 <ann@example.com>: Recipient address rejected', 'dsn', 'dsn:ann:1'),
  true, 'a permanent bounce is recorded: true');
SELECT is(mailroom.record_feedback('bounce', (SELECT id FROM ids WHERE k = 'ann'), 'ann@example.com', '5.1.1',
                                   'again', 'dsn', 'dsn:ann:1'),
  false, 'the same event again: false');
SELECT throws_ok($$SELECT count(*) FROM mailroom.feedback_events$$, '42501', NULL, 'the feedback role cannot read the table');
RESET ROLE;

SELECT results_eq($$SELECT kind, address, status, source, sender, campaign_id FROM mailroom.feedback_events$$,
  $$VALUES ('bounce'::text, 'ann@example.com'::text, '5.1.1'::text, 'dsn'::text, 'shop'::text, NULL::bigint)$$,
  'one event row, with the mail''s sender copied');
SELECT results_eq(
  $$SELECT outcome, smtp_enhanced, smtp_text, finished_as, claimed_at IS NULL FROM mailroom.attempts
    WHERE message_id = (SELECT id FROM ids WHERE k = 'ann') ORDER BY id$$,
  $$VALUES ('sent'::text, NULL::text, NULL::text, 'sent'::text, false),
           ('bounced', '5.1.1', 'smtp; 550 5.1.1 <ann@example.com>: Recipient address rejected', NULL, true)$$,
  'the ledger: the finishing sent row stays, one bounced row follows (no claim, not finishing)');
SELECT results_eq($$SELECT address, reason, source FROM mailroom.suppressions$$,
  $$VALUES ('ann@example.com'::text, 'hard_bounce'::text, 'dsn bounce 5.1.1'::text)$$,
  'the address is suppressed as a hard bounce, once');
SELECT is((SELECT status FROM mailroom.messages WHERE delivery_key = 'ann'), 'sent', 'the mail still reads as sent (the relay took it)');
SELECT is_empty($$SELECT * FROM mailroom.integrity_problems()$$, 'integrity holds: one finishing row, nothing live');
SELECT is((SELECT (mailroom.inspect('ann')->'ledger'->1->>'outcome')), 'bounced', 'inspect shows the bounced row in the ledger');
SELECT is_empty($$SELECT * FROM mailroom.repeated_attempts WHERE recipient LIKE 'ann@%'$$,
  'a bounce is not an attempt: repeated_attempts does not count it');
SELECT is((SELECT attempts FROM mailroom.delivery_metrics('1 day') WHERE split = 'total'), 6::bigint,
  'delivery_metrics counts the six claims, not the bounce');

-- A later mail to the bounced address is stopped by the gate.
SELECT mailroom.enqueue('ann@example.com', 'Again', 'B', p_delivery_key => 'ann-2');
SELECT is((SELECT status FROM mailroom.messages WHERE delivery_key = 'ann-2'), 'cancelled', 'new mail to it is cancelled');

-- Bounce for the leased mail (a relay answered fast): a row, no finish; the
-- runner's report still finishes it.
SET ROLE mailroom_feedback;
SELECT is(mailroom.record_feedback('bounce', (SELECT id FROM ids WHERE k = 'fay'), NULL, '5.2.2', 'mailbox full', 'dsn', 'dsn:fay'),
  true, 'a bounce for a mail still leased is recorded');
RESET ROLE;
SELECT is((SELECT status FROM mailroom.messages WHERE delivery_key = 'fay'), 'sending', 'the lease is untouched');
SELECT is(mailroom.mark_outcomes((SELECT jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'outcome', 'sent')) FROM c
                                  WHERE delivery_key = 'fay')), 1, 'the runner''s report still applies');
SELECT is_empty($$SELECT * FROM mailroom.integrity_problems()$$, 'integrity holds');

-- Delayed: recorded only. Delivered: recorded only.
SET ROLE mailroom_feedback;
SELECT is(mailroom.record_feedback('delayed', (SELECT id FROM ids WHERE k = 'bob'), 'bob@example.com', '4.4.1',
                                   'connection timed out', 'dsn', 'dsn:bob:delayed'), true, 'a delay is recorded');
SELECT is(mailroom.record_feedback('delivered', (SELECT id FROM ids WHERE k = 'bob'), NULL, NULL, NULL, 'ses', 'ses:bob:d'),
  true, 'a delivery is recorded');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.suppressions WHERE address LIKE 'bob@%'), 0, 'neither suppresses');
SELECT is((SELECT count(*)::int FROM mailroom.attempts WHERE message_id = (SELECT id FROM ids WHERE k = 'bob')), 1,
  'neither touches the ledger');

-- Complaint and unsubscribe.
SET ROLE mailroom_feedback;
SELECT is(mailroom.record_feedback('complaint', (SELECT id FROM ids WHERE k = 'dora'), NULL, NULL, 'abuse', 'arf', 'arf:1'),
  true, 'a complaint about the campaign mail');
SELECT is(mailroom.record_feedback('unsubscribe', (SELECT id FROM ids WHERE k = 'cid'), 'cid@example.com', NULL, NULL, 'mailto', 'mailto:cid'),
  true, 'an unsubscribe');
-- An address only (a webhook for mail that is pruned, or never was ours).
SELECT is(mailroom.record_feedback('bounce', NULL, 'Gus@Example.org', '5.1.1', NULL, 'ses', 'ses:gus'), true,
  'a bounce known by address only');
RESET ROLE;
SET ROLE mailroom_feedback;
SELECT is(mailroom.record_feedback('complaint', NULL, 'hal@example.org', NULL, 'abuse', 'app', 'app:hal'), true,
  'a complaint about mail nobody can place');
SELECT is(mailroom.record_feedback('unsubscribe', NULL, 'ida@example.org', NULL, NULL, 'mailgun', 'mailgun:ida'), true,
  'an unsubscribe about mail nobody can place');
RESET ROLE;
SELECT results_eq($$SELECT address, reason, stream FROM mailroom.suppressions ORDER BY address$$,
  $$VALUES ('Gus@Example.org'::text, 'hard_bounce'::text, NULL::text), ('ann@example.com', 'hard_bounce', NULL),
           ('cid@example.com', 'unsubscribed', 'transactional'), ('dora@example.net', 'complaint', 'broadcast'),
           ('fay@example.com', 'hard_bounce', NULL), ('hal@example.org', 'complaint', NULL),
           ('ida@example.org', 'unsubscribed', 'broadcast')$$,
  'bounces suppress for all streams; a complaint and an unsubscribe for the mail''s stream (unknown mail: a complaint all, an unsubscribe the streams that offer unsubscribing)');
SELECT results_eq($$SELECT stream FROM mailroom.feedback_events WHERE event_key IN ('arf:1', 'mailto:cid', 'ses:gus') ORDER BY event_key$$,
  $$VALUES ('broadcast'::text), ('transactional'), (NULL)$$, 'each event carries its mail''s stream');
SELECT results_eq($$SELECT kind, campaign_id FROM mailroom.feedback_events WHERE source = 'arf'$$,
  $$SELECT 'complaint'::text, id FROM camp$$, 'the complaint counts against its campaign');

-- == Bad input: 22023, nothing written =======================================
CREATE TEMP TABLE before AS SELECT (SELECT count(*) FROM mailroom.feedback_events) AS events,
  (SELECT count(*) FROM mailroom.attempts) AS ledger, (SELECT count(*) FROM mailroom.suppressions) AS suppressed;
SELECT throws_ok($$SELECT mailroom.record_feedback('bounced', 1, NULL, NULL, NULL, 'dsn', 'x1')$$, '22023',
  'mailroom: kind: must be bounce, delayed, complaint, delivered or unsubscribe, got bounced', 'unknown kind');
SELECT throws_ok($$SELECT mailroom.record_feedback('bounce', NULL, 'a@example.com', '4.2.2', NULL, 'dsn', 'x2')$$, '22023',
  'mailroom: status: a bounce is a permanent failure (5.x.x), got 4.2.2 (report a transient one as delayed)', 'a transient bounce');
SELECT throws_ok($$SELECT mailroom.record_feedback('bounce', NULL, 'a@example.com', '550', NULL, 'dsn', 'x3')$$, '22023',
  'mailroom: status: must be an enhanced status code like 5.1.1 (RFC 3463), got ''550''', 'a status that is no enhanced code');
SELECT throws_ok($$SELECT mailroom.record_feedback('complaint', NULL, NULL, NULL, NULL, 'arf', 'x4')$$, '22023',
  'mailroom: message_id: a message id or an address is required', 'neither message nor address');
SELECT throws_ok($$SELECT mailroom.record_feedback('complaint', 999999, NULL, NULL, NULL, 'arf', 'x5')$$, '22023',
  'mailroom: message_id: no mail 999999 (pruned or never sent) and no address given', 'an unknown message and no address');
SELECT throws_ok($$SELECT mailroom.record_feedback('complaint', NULL, 'a@example.com', NULL, NULL, 'ARF!', 'x6')$$, '22023',
  'mailroom: source: a lower-case name of at most 50 characters (dsn, arf, ses, app, …) is required, got ''ARF!''', 'a bad source');
SELECT throws_ok($$SELECT mailroom.record_feedback('complaint', NULL, 'a@example.com', NULL, NULL, 'arf', '')$$, '22023',
  'mailroom: event_key: required, at most 500 characters without control characters', 'an empty event key');
SELECT throws_ok($$SELECT mailroom.record_feedback('complaint', NULL, 'not an address', NULL, NULL, 'arf', 'x7')$$, '22023',
  'mailroom: address: contains whitespace or a control character', 'a bad address');
SELECT throws_ok($$SELECT mailroom.record_feedback('delayed', NULL, 'a@example.com', NULL, repeat('x', 2001), 'dsn', 'x8')$$, '22023',
  'mailroom: detail: at most 2000 characters, got 2001', 'a detail too long');
SELECT results_eq($$SELECT (SELECT count(*) FROM mailroom.feedback_events), (SELECT count(*) FROM mailroom.attempts),
                           (SELECT count(*) FROM mailroom.suppressions)$$,
  $$SELECT events, ledger, suppressed FROM before$$, 'the bad calls wrote nothing');

SELECT * FROM finish();
ROLLBACK;
