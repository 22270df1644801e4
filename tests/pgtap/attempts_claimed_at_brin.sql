-- Tests for mailroom:attempts_claimed_at_brin
BEGIN;
SELECT plan(4);

SELECT hasnt_index('mailroom', 'attempts', 'attempts_claimed_at_idx', 'no B-tree on claimed_at (an insertion per attempt)');
SELECT has_index('mailroom', 'attempts', 'attempts_claimed_at_brin', 'claim-time windows keep an index');
SELECT is((SELECT am.amname::text FROM pg_class c JOIN pg_am am ON am.oid = c.relam
           WHERE c.oid = 'mailroom.attempts_claimed_at_brin'::regclass), 'brin', 'a BRIN index');
SELECT is((SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = 'mailroom.attempts_claimed_at_brin'::regclass),
  'CREATE INDEX attempts_claimed_at_brin ON mailroom.attempts USING brin (claimed_at) WITH (pages_per_range=''16'', autosummarize=''on'')',
  'over claimed_at, 16 pages a range, summarised as ranges fill');

SELECT * FROM finish();
ROLLBACK;
