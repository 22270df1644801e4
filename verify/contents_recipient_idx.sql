-- Verify mailroom:contents_recipient_idx on pg

BEGIN;

SELECT 'mailroom.contents_recipient_idx'::regclass;

ROLLBACK;
