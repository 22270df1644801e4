-- pgTAP: mailroom.domain_demand, the shard-side read of a fleet's domain limits
BEGIN;
SELECT plan(6);

SELECT function_privs_are('mailroom', 'domain_demand', ARRAY['text[]'], 'mailroom_operator', ARRAY['EXECUTE'],
  'operators (a fleet directory''s agent) may read domain demand');
SELECT function_privs_are('mailroom', 'domain_demand', ARRAY['text[]'], 'mailroom_app', ARRAY[]::text[],
  'applications may not');

SELECT mailroom.set_domain_limits('busy.example', 20, 600);
SELECT mailroom.enqueue('a' || g || '@Busy.Example', 's', 'b') FROM generate_series(1, 3) g;
SELECT mailroom.enqueue('later@busy.example', 's', 'b', p_send_at => now() + interval '1 hour');
SELECT mailroom.enqueue('x@xn--nicode-2ya.de', 's', 'b');
SELECT mailroom.enqueue('y@ÜNICODE.de', 's', 'b');

SELECT results_eq(
  $$SELECT domain, due, max_per_second, max_per_minute
    FROM mailroom.domain_demand(ARRAY['busy.example', 'BUSY.example', 'xn--nicode-2ya.de', 'idle.example'])$$,
  $$VALUES ('busy.example'::text, 3::bigint, 20, 600), ('idle.example', 0, NULL, NULL),
           ('xn--nicode-2ya.de', 2, NULL::integer, NULL::integer)$$,
  'due mail per domain key (later mail not counted, every spelling counted once), with this shard''s limits');
SELECT is_empty($$SELECT * FROM mailroom.domain_demand('{}')$$, 'no domains, no rows');
SELECT throws_ok($$SELECT * FROM mailroom.domain_demand(NULL)$$, '22023',
  'mailroom: domains: must be an array of at most 1000 domain names without NULL, got NULL', 'NULL is refused');
SELECT throws_ok($$SELECT * FROM mailroom.domain_demand(ARRAY['a.example', NULL])$$, '22023',
  'mailroom: domains: must be an array of at most 1000 domain names without NULL, got 2 elements',
  'a NULL element is refused');

SELECT * FROM finish();
ROLLBACK;
