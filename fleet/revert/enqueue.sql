-- Revert mailroom_fleet:enqueue from pg

BEGIN;

DROP FUNCTION mailroom_fleet.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text);
DROP FUNCTION mailroom_fleet.partition_of(text);
DROP FUNCTION mailroom_fleet.shard_key(text);
DROP FUNCTION mailroom_fleet.address_key(text);
DROP FUNCTION mailroom_fleet._idna_domain(text);
DROP FUNCTION mailroom_fleet._punycode(text);

COMMIT;
