-- Revert mailroom:view_delivered_keys from pg

BEGIN;

DROP VIEW mailroom.delivered_keys;

COMMIT;
