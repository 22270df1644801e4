-- Tests for mailroom:table_contents
BEGIN;
SELECT plan(12);

SELECT has_table('mailroom', 'contents', 'the content table exists');
SELECT table_owner_is('mailroom', 'contents', 'mailroom_owner', 'owned by the owner role');
SELECT has_sequence('mailroom', 'message_ids', 'message ids come from one sequence');
SELECT has_index('mailroom', 'contents', 'contents_delivery_key_unique', ARRAY['delivery_key'], 'idempotency on the delivery key');
SELECT has_index('mailroom', 'contents', 'contents_campaign_idx', ARRAY['campaign_id', 'id'],
  'a campaign''s mail is found by campaign_id, in id order (its queue rows are made a chunk at a time)');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'mailroom.contents_campaign_idx'::regclass),
  ARRAY['deduplicate_items=off'], 'without deduplication: a campaign''s equal keys are appended, no page is deduplicated again and again');
SELECT is((SELECT count(*)::int FROM pg_indexes WHERE schemaname = 'mailroom' AND tablename = 'contents'), 5,
  'five indexes and no more: every one is paid by each of a million campaign rows (a Message-ID carries the mail''s id, message_lookup needs none; the fifth, contents_recipient_idx, is find_messages'' by recipient: deploy/contents_recipient_idx.sql says its cost)');

SELECT throws_ok($$INSERT INTO mailroom.contents (delivery_key, to_address) VALUES ('tc-1', 'a@example.com')$$,
  '23514', NULL, 'a mail needs a template or a subject and a body');
INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text) VALUES ('tc-2', 'Ann@Example.COM', 's', 'b');
SELECT is((SELECT to_domain FROM mailroom.contents WHERE delivery_key = 'tc-2'), 'example.com', 'the domain is kept lower-cased');
INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id, recipient_id)
VALUES ('campaign:7:r1', 'a@example.com', 't', 7, 'r1');
SELECT throws_ok($$INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id, recipient_id)
                   VALUES ('campaign:7:r1', 'b@example.com', 't', 7, 'r1')$$,
  '23505', NULL, 'a campaign mails a recipient once: enqueue_campaign keys its mail campaign:<id>:<recipient_id>, the delivery key is unique');
SELECT is((SELECT array_agg(CASE WHEN strpos(a, '@') > 0 THEN lower(split_part(a, '@', -1)) END ORDER BY a)
           FROM unnest(ARRAY['Ann@Example.COM', 'a@b@C.de', 'no-at', 'x@', '@Y.org', 'jürgen@BÜCHER.example']) a),
          (SELECT array_agg(lower(substring(a FROM '@([^@]*)$')) ORDER BY a)
           FROM unnest(ARRAY['Ann@Example.COM', 'a@b@C.de', 'no-at', 'x@', '@Y.org', 'jürgen@BÜCHER.example']) a),
  'to_domain''s expression gives what the regular expression gave (after the last @, NULL without one)');
SET LOCAL ROLE mailroom_app;
SELECT throws_ok($$SELECT count(*) FROM mailroom.contents$$, '42501', NULL, 'applications cannot read it directly');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
