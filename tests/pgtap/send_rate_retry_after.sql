-- pgTAP: mailroom.send_rate_retry_after
BEGIN;
SELECT plan(11);

SELECT has_function('mailroom', 'send_rate_retry_after', ARRAY['text'], 'send_rate_retry_after exists');
SELECT hasnt_function('mailroom', 'send_rate_retry_after', ARRAY['text', 'timestamp with time zone'], 'the v0.3 signature with p_now is gone');
SELECT is_definer('mailroom', 'send_rate_retry_after', ARRAY['text'], 'it is SECURITY DEFINER');
SELECT function_privs_are('mailroom', 'send_rate_retry_after', ARRAY['text'], 'mailroom_runner', ARRAY['EXECUTE'], 'runners may call it');
SELECT function_privs_are('mailroom', '_send_rate_retry_after', ARRAY['text', 'timestamp with time zone'], 'mailroom_runner', ARRAY[]::text[], 'the clock-pinning twin is owner-only');

DELETE FROM mailroom.rate_limits;
DELETE FROM mailroom.domain_budgets;
DELETE FROM mailroom.senders;
SELECT is(mailroom._send_rate_retry_after(NULL, '2030-01-01 00:00:00.5Z'), NULL, 'no limits: NULL (idle as usual)');
SELECT mailroom.set_sender_limits('bulk', 4);
SELECT is(mailroom._send_rate_retry_after('bulk', '2030-01-01 00:00:00.5Z'), NULL, 'a limited sender with room: NULL');
SELECT mailroom._send_rate_record('{mailroom/sender/bulk/s}', '{4}', '{1 second}', '2030-01-01 00:00:00.3Z');
SELECT is(mailroom._send_rate_retry_after('bulk', '2030-01-01 00:00:00.5Z'), interval '0.82 seconds',
  'an exhausted sender: until its oldest slot slides out (0.30 s + 1.02 s)');
SELECT mailroom.set_domain_limits('capped.test', 2);
SELECT mailroom._domain_budgets_spend('{capped.test, capped.test}', '{2, 2}', '{NULL, NULL}', '2030-01-01 00:00:00.1Z');
SELECT is(mailroom._send_rate_retry_after(NULL, '2030-01-01 00:00:00.5Z'), interval '0.62 seconds',
  'any sender: the first exhausted budget to free (the domain, at 1.12 s)');
SELECT is(mailroom._send_rate_retry_after('bulk', '2030-01-01 00:00:00.5Z'), interval '0.82 seconds',
  'a claim for an exhausted sender waits for that sender, whatever the domains');
SELECT is(mailroom._send_rate_retry_after('default', '2030-01-01 00:00:00.5Z'), interval '0.62 seconds',
  'an unlimited sender waits only for the exhausted domain');

SELECT * FROM finish();
ROLLBACK;
