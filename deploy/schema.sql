-- Deploy mailroom:schema to pg

BEGIN;

CREATE SCHEMA mailroom;
COMMENT ON SCHEMA mailroom IS
  'mailroom: reliable email delivery. Call the functions; the tables are private.';

-- Nobody creates objects here but the deployer and the owner role.
REVOKE ALL ON SCHEMA mailroom FROM PUBLIC;

COMMIT;
