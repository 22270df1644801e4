-- Verify mailroom:forgotten_addresses on pg

BEGIN;

SELECT key_hash, forgotten_at, in_flight FROM mailroom.forgotten_addresses WHERE false;
DO $$
BEGIN
  ASSERT (SELECT count(*) = 1 FROM mailroom.erasure_pepper), 'no pepper for forgotten addresses';
  ASSERT octet_length(mailroom._forgotten_hash('ann@example.com')) = 32, 'the hash is not HMAC-SHA256';
END
$$;

ROLLBACK;
