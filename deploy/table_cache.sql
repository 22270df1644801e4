-- Deploy mailroom:table_cache to pg
-- requires: roles

BEGIN;

-- UNLOGGED: no WAL, so writes are cheap; crash recovery empties the table and
-- standbys do not see it. Both are fine for a cache (docs/cache-and-rate-limits.md).
CREATE UNLOGGED TABLE mailroom.cache (
  -- COLLATE "C": byte order, so a prefix is one contiguous range of the
  -- primary key and starts_with() can use it whatever the database collation.
  key         text COLLATE "C" NOT NULL,
  value       jsonb NOT NULL,
  expires_at  timestamptz,
  created_at  timestamptz NOT NULL DEFAULT now(),
  accessed_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT cache_pkey PRIMARY KEY (key),
  -- A B-tree entry must fit a third of a page; keys are names, not payloads.
  CONSTRAINT cache_key_length CHECK (octet_length(key) BETWEEN 1 AND 1000)
) WITH (fillfactor = 80);  -- room for HOT updates of accessed_at

ALTER TABLE mailroom.cache OWNER TO mailroom_owner;

-- The sweep deletes expired rows through this index.
CREATE INDEX cache_expires_at_idx ON mailroom.cache (expires_at)
  WHERE expires_at IS NOT NULL;

COMMENT ON TABLE mailroom.cache IS
  'Key-value cache for applications (cache_get, cache_set, ...). UNLOGGED: emptied by crash recovery, not replicated. Private: use the functions.';
COMMENT ON COLUMN mailroom.cache.key IS
  'Cache key, 1 to 1000 bytes, compared bytewise (COLLATE "C"); namespace with colons: "courses:list:page=2".';
COMMENT ON COLUMN mailroom.cache.value IS 'The cached JSON value.';
COMMENT ON COLUMN mailroom.cache.expires_at IS
  'The entry is a miss from this instant on (checked on every read); NULL = no expiry.';
COMMENT ON COLUMN mailroom.cache.created_at IS 'When the value was last set.';
COMMENT ON COLUMN mailroom.cache.accessed_at IS
  'Last read or write, at a granularity of one minute (cache_get touches it at most once a minute): the LRU order of cache_sweep.';

COMMIT;
