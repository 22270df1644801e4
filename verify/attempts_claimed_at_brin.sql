-- Verify mailroom:attempts_claimed_at_brin on pg

BEGIN;

DO $$
BEGIN
  ASSERT (SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam
          WHERE c.oid = 'mailroom.attempts_claimed_at_brin'::regclass) = 'brin',
    'attempts_claimed_at_brin is not a BRIN index';
  ASSERT to_regclass('mailroom.attempts_claimed_at_idx') IS NULL,
    'the B-tree attempts_claimed_at_idx is still there';
END
$$;

ROLLBACK;
