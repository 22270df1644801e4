-- Verify mailroom:table_suppressions on pg

BEGIN;

SELECT address_key, address, reason, source, created_at FROM mailroom.suppressions WHERE false;
DO $$ BEGIN
  ASSERT mailroom._address_key('Ann@Example.COM') = 'Ann@example.com', '_address_key does not fold the domain';
END $$;

ROLLBACK;
