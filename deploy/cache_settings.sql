-- Deploy mailroom:cache_settings to pg
-- requires: table_settings
-- requires: cache_sweep

BEGIN;

INSERT INTO mailroom.settings (key, value, description) VALUES
  ('cache_max_entries', '100000',
   'Most entries mailroom.cache keeps: cache_sweep (every minute) evicts the least recently used beyond it.')
ON CONFLICT (key) DO NOTHING;

COMMIT;
