-- pgTAP: SMTP submission logins (issue 30, item 4). Operators set, list and
-- drop them; the stored form is an scrypt hash and nothing else is accepted;
-- only mailroom_submission reads a hash, one login at a time.
BEGIN;
SELECT plan(28);

-- contract
SELECT has_table('mailroom', 'submission_credentials', 'submission_credentials exists');
SELECT has_role('mailroom_submission', 'the role of the submit server exists');
SELECT is_definer('mailroom', 'set_submission_credential', ARRAY['text', 'text', 'text', 'text[]', 'integer', 'text'],
                  'set_submission_credential is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'set_submission_credential', ARRAY['text', 'text', 'text', 'text[]', 'integer', 'text'],
                          'mailroom_operator', ARRAY['EXECUTE'], 'operators set logins');
SELECT function_privs_are('mailroom', 'submission_login', ARRAY['text'], 'mailroom_submission', ARRAY['EXECUTE'],
                          'the submit server reads a login');
SELECT function_privs_are('mailroom', 'submission_login', ARRAY['text'], 'mailroom_app', ARRAY[]::text[],
                          'applications do not read hashes');

\set hash '''scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'''

-- behaviour
SELECT is(mailroom.set_submission_credential('shop', :hash, 'default', ARRAY['NoReply@Shop.Example', '@news.shop.example']),
          true, 'a new login: true');
SELECT results_eq($$SELECT username, sender, allowed_from, stream, per_minute FROM mailroom.submission_credential_list()$$,
  $$VALUES ('shop', 'default', ARRAY['noreply@shop.example', '@news.shop.example'], 'transactional', 60)$$,
  'listed without its hash, identities in lower case, defaults transactional and 60 a minute');
SELECT is(mailroom.set_submission_credential('shop', :hash, 'news', ARRAY['@shop.example'], 10, 'broadcast'),
          false, 'the same login again: replaced, false');
SELECT results_eq($$SELECT sender, allowed_from, stream, per_minute FROM mailroom.submission_login('shop')$$,
  $$VALUES ('news', ARRAY['@shop.example'], 'broadcast', 10)$$, 'submission_login reads the replaced login');
SELECT is_empty($$SELECT * FROM mailroom.submission_login('nobody')$$, 'no row for an unknown login');

-- errors, each followed by: nothing changed
SELECT throws_ok($$SELECT mailroom.set_submission_credential('shop2', 'hunter2', 'default', ARRAY['@shop.example'])$$,
  '22023', 'mailroom: password_hash: not an scrypt$N$r$p$SALT$HASH hash', 'a plain password is refused, not echoed');
SELECT throws_ok($$SELECT mailroom.set_submission_credential('bad name', 'x', 'default', ARRAY['@shop.example'])$$,
  '22023', 'mailroom: username: "bad name" is not a user name (a letter or digit, then letters, digits and _ . @ + -, at most 128)',
  'a user name with a space is refused');
SELECT throws_ok(format($$SELECT mailroom.set_submission_credential('shop2', %L, 'default', ARRAY['shop.example'])$$, :hash),
  '22023', 'mailroom: allowed_from: "shop.example" is neither an address nor @domain (ASCII; an IDN domain as A-labels)',
  'a bare domain is refused (say @shop.example)');
SELECT throws_ok(format($$SELECT mailroom.set_submission_credential('shop2', %L, 'default', ARRAY[]::text[])$$, :hash),
  '22023', 'mailroom: allowed_from: give 1 to 100 addresses or @domains', 'no identity is refused');
SELECT throws_ok(format($$SELECT mailroom.set_submission_credential('shop2', %L, 'default', ARRAY['@shop.example'], 0)$$, :hash),
  '22023', NULL, 'a rate of 0 is refused');
SELECT throws_ok(format($$SELECT mailroom.set_submission_credential('shop2', %L, 'default', ARRAY['@shop.example'], 5, 'nope')$$, :hash),
  '22023', NULL, 'an unknown stream is refused');
SELECT is((SELECT count(*)::int FROM mailroom.submission_credentials), 1, 'none of the refused logins was written');

-- recipients, as RCPT TO asks (the login's stream is broadcast now)
SELECT is(mailroom.submission_recipient_refusal('shop', 'ann@example.com'), NULL, 'a good recipient: no refusal');
SELECT matches(mailroom.submission_recipient_refusal('shop', 'not an address'), '^invalid: mailroom: to: ',
               'a bad address: enqueue''s own message');
SELECT mailroom.suppress('gone@example.com', 'complaint', 'test', 'broadcast');
SELECT mailroom.suppress('tx-only@example.com', 'manual', 'test', 'transactional');
SELECT is(mailroom.submission_recipient_refusal('shop', 'gone@Example.COM'), 'suppressed',
          'suppressed for the login''s stream (the domain in any case)');
SELECT is(mailroom.submission_recipient_refusal('shop', 'tx-only@example.com'), NULL,
          'suppressed for another stream only: not refused');
SELECT throws_ok($$SELECT mailroom.submission_recipient_refusal('nobody', 'ann@example.com')$$, '22023',
                 'mailroom: username: no submission login "nobody"', 'an unknown login is an error');
SELECT function_privs_are('mailroom', 'submission_recipient_refusal', ARRAY['text', 'text'], 'mailroom_app',
                          ARRAY[]::text[], 'applications do not check recipients this way');

SELECT is(mailroom.drop_submission_credential('shop'), true, 'dropped');
SELECT is(mailroom.drop_submission_credential('shop'), false, 'dropping again: false');

-- roles at work
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT * FROM mailroom.submission_login('shop')$$, '42501', NULL, 'mailroom_app cannot read a login');
SELECT throws_ok($$SELECT * FROM mailroom.submission_credentials$$, '42501', NULL, 'nor the table');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
