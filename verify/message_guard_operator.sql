-- Verify mailroom:message_guard_operator on pg: the v0.3 operator guard
-- trigger is gone (claim_batch's gate replaces it).

BEGIN;

DO $$
BEGIN
  ASSERT NOT EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgname = 'messages_guard_operator_requeue'),
    'the operator guard trigger still exists';
END
$$;

ROLLBACK;
