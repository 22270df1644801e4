-- Verify mailroom:address_key_qualified on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT p.prosrc LIKE '%OPERATOR(pg_catalog.||)%' FROM pg_catalog.pg_proc p
          WHERE p.oid = 'mailroom._address_key(text)'::pg_catalog.regprocedure),
         'mailroom._address_key does not schema-qualify its operator';
  ASSERT mailroom._address_key('Ann@Example.COM') = 'Ann@example.com', '_address_key changed its result';
END
$$;

ROLLBACK;
