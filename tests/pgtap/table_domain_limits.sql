-- pgTAP: mailroom.domain_limits, set_domain_limits, delete_domain_limits
BEGIN;
SELECT plan(14);

SELECT has_table('mailroom', 'domain_limits', 'mailroom.domain_limits exists');
SELECT col_is_pk('mailroom', 'domain_limits', 'domain', 'domain is the primary key');
SELECT table_privs_are('mailroom', 'domain_limits', 'mailroom_runner', ARRAY[]::text[], 'runners have no table privileges');
SELECT function_privs_are('mailroom', 'set_domain_limits', ARRAY['text', 'integer', 'integer'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may set domain rates');
SELECT function_privs_are('mailroom', 'delete_domain_limits', ARRAY['text'], 'mailroom_operator', ARRAY['EXECUTE'], 'operators may delete domain rates');
SELECT is_definer('mailroom', 'set_domain_limits', ARRAY['text', 'integer', 'integer'], 'set_domain_limits is SECURITY DEFINER');

SELECT results_eq($$SELECT max_per_second, max_per_minute FROM mailroom.domain_limits WHERE domain = '*'$$,
  $$VALUES (NULL::integer, NULL::integer)$$, 'a default row exists, without limits');

SELECT mailroom.set_domain_limits('Gmail.COM', 20, 600);
SELECT mailroom.set_domain_limits('*', 100);
SELECT results_eq($$SELECT domain, max_per_second, max_per_minute FROM mailroom.domain_limits ORDER BY domain$$,
  $$VALUES ('*'::text, 100, NULL::integer), ('gmail.com', 20, 600)$$, 'domains are stored lower-case; the default is set with *');
SELECT is(mailroom.delete_domain_limits('GMAIL.com'), true, 'delete_domain_limits returns a domain to the default');
SELECT is(mailroom.delete_domain_limits('gmail.com'), false, '... false when it had no row');

SELECT throws_ok($$SELECT mailroom.delete_domain_limits('*')$$, '22023',
  'mailroom: domain: the default row ''*'' stays; set it to NULL, NULL for no default limit', 'the default row cannot be deleted');
SELECT throws_ok($$SELECT mailroom.set_domain_limits('a@b.com', 5)$$, '22023',
  'mailroom: domain: must be a domain name or ''*'' (the default), got a@b.com', 'an address is not a domain');
SELECT throws_ok($$SELECT mailroom.set_domain_limits('b.com', 0)$$, '22023',
  'mailroom: max_per_second: must be between 1 and 1000000 or NULL, got 0', 'a zero rate is refused');
SELECT results_eq($$SELECT domain, max_per_second FROM mailroom.domain_limits ORDER BY domain$$,
  $$VALUES ('*'::text, 100)$$, 'refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
