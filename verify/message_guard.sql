-- Verify mailroom:message_guard on pg: the v0.3 trigger function is gone
-- (claim_batch's gate replaces it).

BEGIN;

DO $$
BEGIN
  ASSERT pg_catalog.to_regprocedure('mailroom._message_guard()') IS NULL,
    'mailroom._message_guard() still exists';
  ASSERT NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'mailroom' AND t.tgname LIKE 'messages_guard%'),
    'a messages guard trigger still exists';
END
$$;

ROLLBACK;
