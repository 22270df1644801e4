-- Tests for mailroom:queue_autovacuum
BEGIN;
SELECT plan(2);

SELECT is((SELECT string_agg(relname || ': ' || array_to_string(ARRAY(SELECT o FROM unnest(reloptions) o ORDER BY 1), ', '), ' | '
                   ORDER BY relname)
           FROM pg_class WHERE oid IN ('mailroom.messages'::regclass, 'mailroom.attempts'::regclass)),
  'attempts: autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_limit=2000, '
  'autovacuum_vacuum_insert_scale_factor=0, autovacuum_vacuum_insert_threshold=10000, '
  'autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=10000 | '
  'messages: autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_limit=2000, '
  'autovacuum_vacuum_insert_scale_factor=0, autovacuum_vacuum_insert_threshold=10000, '
  'autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=10000',
  'the queue tables vacuum after every 10,000 dead or inserted rows and analyze after 2 %');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'mailroom.cache'::regclass),
          ARRAY['fillfactor=80'], 'other tables keep their own settings');

SELECT * FROM finish();
ROLLBACK;
