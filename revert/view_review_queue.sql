-- Revert mailroom:view_review_queue from pg: back to the state split_messages
-- left (no review_queue view; its revert creates the v0.3 one on the table again).

BEGIN;

DROP VIEW mailroom.review_queue;

COMMIT;
