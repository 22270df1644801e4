-- pgTAP: mailroom.unsubscribe, the unsubscribe service's one right. Its role,
-- mailroom_unsubscribe, may execute this function and nothing else; the
-- function only ever adds an unsubscribed suppression for one stream.
BEGIN;
SELECT plan(16);

SELECT has_role('mailroom_unsubscribe', 'the role exists');
SELECT is((SELECT rolcanlogin FROM pg_roles WHERE rolname = 'mailroom_unsubscribe'), false, 'NOLOGIN: logins are granted it');
SELECT is_definer('mailroom', 'unsubscribe', ARRAY['text', 'text', 'bigint', 'text'], 'SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'unsubscribe', ARRAY['text', 'text', 'bigint', 'text'], 'mailroom_unsubscribe', ARRAY['EXECUTE'],
  'the unsubscribe role may execute it');
SELECT function_privs_are('mailroom', 'unsubscribe', ARRAY['text', 'text', 'bigint', 'text'], 'mailroom_app', ARRAY[]::text[],
  'applications use suppress instead');
SELECT is((SELECT count(*)::int FROM pg_proc p WHERE p.pronamespace = 'mailroom'::regnamespace
           AND has_function_privilege('mailroom_unsubscribe', p.oid, 'execute')), 1,
  'mailroom_unsubscribe may execute exactly one function');

SET ROLE mailroom_unsubscribe;
SELECT lives_ok($$SELECT mailroom.unsubscribe('Ann@Example.ORG', 'broadcast', 42)$$, 'unsubscribe for broadcast');
SELECT lives_ok($$SELECT mailroom.unsubscribe('Ann@example.org', 'broadcast', 43)$$, 'again: no error, nothing new');
SELECT throws_ok($$SELECT mailroom.suppress('bob@example.org')$$, '42501', 'permission denied for function suppress',
  'it cannot suppress for all streams');
SELECT throws_ok($$SELECT mailroom.unsuppress('ann@example.org')$$, '42501', 'permission denied for function unsuppress',
  'it cannot lift a suppression');
SELECT throws_ok($$SELECT count(*) FROM mailroom.suppressions$$, '42501', 'permission denied for table suppressions',
  'it cannot read who is suppressed');
SELECT throws_ok($$SELECT mailroom.unsubscribe('bob@example.org', NULL, 1)$$, '22023',
  'mailroom: stream: no stream named "NULL"', 'never for all streams');
SELECT throws_ok($$SELECT mailroom.unsubscribe('not an address', 'broadcast', 1)$$, '22023',
  'mailroom: address: contains whitespace or a control character', 'a bad address');
SELECT throws_ok($$SELECT mailroom.unsubscribe('bob@example.org', 'broadcast', 1, E'x\ny')$$, '22023',
  'mailroom: source: 1 to 40 characters of a-z, 0-9 and _ . : -', 'a bad source');
RESET ROLE;
SELECT results_eq($$SELECT address, stream, reason, source FROM mailroom.suppressions$$,
  $$VALUES ('Ann@Example.ORG', 'broadcast', 'unsubscribed', 'one-click message 42')$$,
  'one row: the first unsubscribe, for broadcast only');
CREATE TEMP TABLE tx AS SELECT mailroom.enqueue('Ann@example.org', 'Reset', 'B') AS id;
SELECT is((SELECT status FROM mailroom.messages JOIN tx USING (id)), 'queued', 'transactional mail to the address is still queued');

SELECT * FROM finish();
ROLLBACK;
