-- Revert mailroom:view_review_queue from pg

BEGIN;

DROP VIEW mailroom.review_queue;

COMMIT;
