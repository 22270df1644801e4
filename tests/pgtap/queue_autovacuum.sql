-- Tests for mailroom:queue_autovacuum
BEGIN;
SELECT plan(4);

SELECT is((SELECT array_to_string(ARRAY(SELECT o FROM unnest(reloptions) o ORDER BY 1), ', ')
           FROM pg_class WHERE oid = 'mailroom.attempts'::regclass),
  'autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_limit=2000, '
  'autovacuum_vacuum_insert_scale_factor=0, autovacuum_vacuum_insert_threshold=10000, '
  'autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=10000',
  'the ledger vacuums after every 10,000 dead or inserted rows and analyzes after 2 %');
SELECT is((SELECT relkind FROM pg_class WHERE oid = 'mailroom.messages'::regclass), 'v'::"char",
  'messages is a view: nothing to tune there any more');
SELECT ok((SELECT reloptions @> ARRAY['fillfactor=50', 'autovacuum_vacuum_threshold=5000']
           FROM pg_class WHERE oid = 'mailroom.queue'::regclass)
          AND (SELECT reloptions @> ARRAY['autovacuum_vacuum_insert_threshold=100000']
               FROM pg_class WHERE oid = 'mailroom.contents'::regclass),
  'the queue and contents keep the settings their own changes gave them');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'mailroom.cache'::regclass),
          ARRAY['fillfactor=80'], 'other tables keep their own settings');

SELECT * FROM finish();
ROLLBACK;
