-- pgTAP: suppress / unsuppress. The suppression row is what counts: claim_batch's
-- gate never hands out mail to a suppressed address; suppress itself no longer
-- cancels live mail (no index by address: see deploy/suppress.sql).
BEGIN;
SELECT plan(18);

SELECT has_function('mailroom', 'suppress', ARRAY['text', 'text', 'text', 'text'], 'suppress exists');
SELECT hasnt_function('mailroom', 'suppress', ARRAY['text', 'text', 'text', 'timestamp with time zone'], 'without p_now');
SELECT has_function('mailroom', 'unsuppress', ARRAY['text', 'text'], 'unsuppress exists');
SELECT function_privs_are('mailroom', 'suppress', ARRAY['text', 'text', 'text', 'text'], 'mailroom_app', ARRAY['EXECUTE'], 'the app may suppress');
SELECT function_privs_are('mailroom', 'unsuppress', ARRAY['text', 'text'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may unsuppress');

SELECT mailroom.upsert_template('news', 'News', 'Hello');
SELECT mailroom.enqueue('ann@example.org', 'S', 'B');
SELECT mailroom.enqueue('Ann@example.org', 'S3', 'B');
SELECT mailroom.enqueue('bob@example.org', 'S', 'B');
CREATE TEMP TABLE c AS SELECT mailroom.enqueue_campaign('c', 'news', 'SELECT 1 AS recipient_id, ''ann@EXAMPLE.ORG'' AS email') AS id;
SELECT mailroom.pause_campaign((SELECT id FROM c));

SET ROLE mailroom_app;
SELECT is(mailroom.suppress('ann@Example.ORG', 'unsubscribed', 'preferences page'), 0,
  'suppress returns 0: it cancels nothing itself');
RESET ROLE;
SELECT results_eq($$SELECT address_key, address, reason, source FROM mailroom.suppressions$$,
  $$VALUES ('ann@example.org', 'ann@Example.ORG', 'unsubscribed', 'preferences page')$$, 'the suppression is recorded');
SELECT mailroom.resume_campaign((SELECT id FROM c));
CREATE TEMP TABLE b AS SELECT * FROM mailroom.claim_batch('w', 10);
SELECT results_eq($$SELECT to_address FROM b ORDER BY id$$, $$VALUES ('Ann@example.org'), ('bob@example.org')$$,
  'the next claim hands out only mail to other addresses (another local part, Ann@, is another address)');
SELECT results_eq($$SELECT coalesce(subject, 'campaign'), status, coalesce(status_reason, '-') FROM mailroom.messages ORDER BY id$$,
  $$VALUES ('S', 'cancelled', 'suppressed'), ('S3', 'sending', '-'), ('S', 'sending', '-'),
           ('campaign', 'cancelled', 'suppressed')$$,
  'the claim finished the suppressed address''s mail (the paused campaign''s too, once resumed) as cancelled');
SET ROLE mailroom_app;
SELECT is(mailroom.suppress('ann@example.org', 'complaint'), 0, 'suppressing again changes nothing');
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
