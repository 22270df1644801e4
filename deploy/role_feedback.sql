-- Deploy mailroom:role_feedback to pg
-- requires: roles

-- The role that reports what comes back after a mail left: bounces, delays,
-- complaints and unsubscribes (mailroom inbound, the provider webhooks, or an
-- application with its own inbound handling). It may call record_feedback
-- and keep_unparsed_inbound and nothing else: a leaked inbound credential
-- can suppress addresses and add feedback rows, but cannot claim, send,
-- read mail or decide anything an operator decides. Runners do not get it:
-- a runner never needs to report feedback, and the inbound receiver runs
-- under its own login.

BEGIN;

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mailroom_feedback') THEN
    CREATE ROLE mailroom_feedback NOLOGIN;
  END IF;
END
$$;
COMMENT ON ROLE mailroom_feedback IS
  'Feedback reporters (mailroom inbound, provider webhooks, applications): record bounces, delays, complaints and unsubscribes; keep inbound mail nobody could parse.';

GRANT USAGE ON SCHEMA mailroom TO mailroom_feedback;

COMMIT;
