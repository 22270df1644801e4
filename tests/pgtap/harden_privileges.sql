-- Tests for mailroom:harden_privileges
BEGIN;
SELECT plan(9);

SELECT function_privs_are('mailroom', 'cache_sweep', ARRAY['bigint'],
                          'mailroom_runner', ARRAY[]::text[], 'runners may not sweep the cache');
SELECT function_privs_are('mailroom', 'rate_limit_sweep', ARRAY[]::text[],
                          'mailroom_runner', ARRAY[]::text[], 'runners may not sweep the rate limits');
SELECT function_privs_are('mailroom', 'cache_sweep', ARRAY['bigint'],
                          'mailroom_operator', ARRAY['EXECUTE'], 'operators still sweep the cache');
SELECT function_privs_are('mailroom', 'rate_limit_sweep', ARRAY[]::text[],
                          'mailroom_operator', ARRAY['EXECUTE'], 'operators still sweep the rate limits');
SELECT ok(NOT has_type_privilege('public', 'mailroom.cron_spec', 'usage'), 'PUBLIC has no USAGE on cron_spec');
SELECT ok(has_type_privilege('mailroom_owner', 'mailroom.cron_spec', 'usage'), 'its owner has');

INSERT INTO mailroom.cache (key, value) VALUES ('kept', '1');
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT * FROM mailroom.cache_sweep(0)$$, '42501',
                 'permission denied for function cache_sweep', 'a runner cannot empty the cache');
SELECT throws_ok($$SELECT mailroom.rate_limit_sweep()$$, '42501',
                 'permission denied for function rate_limit_sweep', 'nor sweep the rate limits');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM mailroom.cache WHERE key = 'kept'), 1, 'the cache entry is still there');

SELECT * FROM finish();
ROLLBACK;
