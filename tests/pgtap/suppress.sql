-- pgTAP: suppress / unsuppress.
BEGIN;
SELECT plan(16);

SELECT has_function('mailroom', 'suppress', ARRAY['text', 'text', 'text', 'timestamp with time zone'], 'suppress exists');
SELECT has_function('mailroom', 'unsuppress', ARRAY['text'], 'unsuppress exists');
SELECT function_privs_are('mailroom', 'suppress', ARRAY['text', 'text', 'text', 'timestamp with time zone'], 'mailroom_app', ARRAY['EXECUTE'], 'the app may suppress');
SELECT function_privs_are('mailroom', 'unsuppress', ARRAY['text'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may unsuppress');

SELECT mailroom.upsert_template('news', 'News', 'Hello');
SELECT mailroom.enqueue('ann@example.org', 'S', 'B');
SELECT mailroom.enqueue('ann@example.org', 'S2', 'B', p_send_at => now() + interval '1 day');
SELECT mailroom.enqueue('Ann@example.org', 'S3', 'B');
SELECT mailroom.enqueue('bob@example.org', 'S', 'B');
CREATE TEMP TABLE c AS SELECT mailroom.enqueue_campaign('c', 'news', 'SELECT 1 AS recipient_id, ''ann@EXAMPLE.ORG'' AS email') AS id;
SELECT mailroom.pause_campaign((SELECT id FROM c));
UPDATE mailroom.messages SET status = 'sent', sent_at = now() WHERE subject = 'S2';

SET ROLE mailroom_app;
SELECT is(mailroom.suppress('ann@Example.ORG', 'unsubscribed', 'preferences page'), 2,
  'suppress cancels queued and paused mail to the address, whatever the domain''s case');
RESET ROLE;
SELECT results_eq($$SELECT coalesce(subject, 'campaign'), status, coalesce(status_reason, '-') FROM mailroom.messages ORDER BY id$$,
  $$VALUES ('S', 'cancelled', 'suppressed'), ('S2', 'sent', '-'), ('S3', 'queued', '-'), ('S', 'queued', '-'),
           ('campaign', 'cancelled', 'suppressed')$$,
  'sent mail, another local part (Ann@) and other addresses are untouched');
SELECT results_eq($$SELECT address_key, address, reason, source FROM mailroom.suppressions$$,
  $$VALUES ('ann@example.org', 'ann@Example.ORG', 'unsubscribed', 'preferences page')$$, 'the suppression is recorded');
SET ROLE mailroom_app;
SELECT is(mailroom.suppress('ann@example.org', 'complaint'), 0, 'suppressing again: nothing more to cancel');
RESET ROLE;
SELECT is((SELECT reason FROM mailroom.suppressions), 'unsubscribed', 'the first reason stays');
CREATE TEMP TABLE e1 AS SELECT mailroom.enqueue('ann@example.org', 'later', 'B') AS id;
SELECT is((SELECT m.status FROM mailroom.messages m JOIN e1 USING (id)), 'cancelled',
  'enqueue to a suppressed address stores it cancelled');

SELECT is(mailroom.unsuppress('ann@EXAMPLE.org'), true, 'unsuppress removes it (domain case-insensitive)');
SELECT is(mailroom.unsuppress('ann@example.org'), false, 'unsuppressing twice: false');
CREATE TEMP TABLE e2 AS SELECT mailroom.enqueue('ann@example.org', 'again', 'B') AS id;
SELECT is((SELECT m.status FROM mailroom.messages m JOIN e2 USING (id)), 'queued',
  'mail is accepted again');

SELECT throws_ok($$SELECT mailroom.suppress('ann@example.org', 'bored')$$, '22023',
  'mailroom: reason: must be unsubscribed, hard_bounce, complaint or manual, got bored', 'unknown reason');
SELECT throws_ok($$SELECT mailroom.suppress('not an address')$$, '22023',
  'mailroom: address: contains whitespace or a control character', 'bad address');
SELECT is((SELECT count(*)::int FROM mailroom.suppressions), 0, 'nothing written by the bad calls');

SELECT * FROM finish();
ROLLBACK;
