-- Tests for mailroom:destination_throttle
BEGIN;
SELECT plan(12);
SET LOCAL client_min_messages = warning;

SELECT has_function('mailroom', 'destination_rates', ARRAY[]::text[], 'destination_rates() exists');
SELECT is_definer('mailroom', 'destination_rates', ARRAY[]::text[], 'destination_rates is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'set_destination_group', ARRAY['text', 'text'], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators set destination groups');
SELECT function_privs_are('mailroom', '_learn_destination_rates', ARRAY['jsonb', 'timestamp with time zone'], 'mailroom_runner',
  ARRAY[]::text[], 'runners do not call the learning step directly');

SELECT is(mailroom._destination_group('gmail-smtp-in.l.google.com'), 'google', 'an MX host finds its group by suffix');
SELECT is(mailroom._destination_group('sub.hotmail.co.uk'), 'microsoft', 'a subdomain finds its group');
SELECT is(mailroom._destination_group('example.org'), 'example.org', 'a domain no pattern matches is its own group');
SELECT ok(mailroom._is_rate_deferral(451, '4.7.650', 'The mail server has been temporarily rate limited'),
  'Microsoft''s 4.7.650 is a rate deferral');
SELECT ok(NOT mailroom._is_rate_deferral(452, '4.2.2', 'mailbox full'), 'a full mailbox is not');

SELECT throws_ok($$SELECT mailroom.set_destination_group('bad/pattern', 'google')$$, '22023',
  'mailroom: pattern: must be a domain or host suffix such as gmail.com, got bad/pattern', 'a bad pattern is refused');
SELECT throws_ok($$SELECT mailroom.set_setting('throttle_ceiling', '0')$$, '22023',
  'mailroom: throttle_ceiling: must be between 1 and 10000000, got 0', 'a ceiling of 0 is refused');
SELECT is((SELECT count(*)::int FROM mailroom.destination_groups WHERE source = 'operator'), 0, 'nothing was written');

SELECT * FROM finish();
ROLLBACK;
