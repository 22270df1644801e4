-- Revert mailroom:streams from pg
-- Scoped suppressions go (an unsubscribe from one stream would otherwise
-- become an all-streams suppression); all-streams rows stay.

BEGIN;

DROP FUNCTION mailroom._check_stream(text);
DROP VIEW mailroom.stream_overview;
DROP FUNCTION mailroom.stream_settings();
DROP FUNCTION mailroom.define_stream(text, boolean, text);
ALTER TABLE mailroom.schedules DROP COLUMN stream;
ALTER TABLE mailroom.campaigns DROP COLUMN stream;
DELETE FROM mailroom.suppressions WHERE stream IS NOT NULL;
ALTER TABLE mailroom.suppressions
  DROP CONSTRAINT suppressions_address_stream_unique,
  DROP COLUMN stream,
  ADD PRIMARY KEY (address_key);
COMMENT ON TABLE mailroom.suppressions IS
  'Addresses never to mail. enqueue stores mail to them as cancelled (reason suppressed); a 5.1.x bounce adds one.';
DROP TABLE mailroom.streams;

COMMIT;
