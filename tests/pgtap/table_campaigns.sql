-- pgTAP: mailroom.campaigns and what mail keeps of it (in mailroom.contents since split_messages, v0.4).
BEGIN;
SELECT plan(11);

SELECT has_table('mailroom', 'campaigns', 'campaigns exists');
SELECT columns_are('mailroom', 'campaigns', ARRAY['id', 'name', 'template_key', 'vars', 'headers', 'priority', 'sender',
  'max_attempts', 'on_ambiguous', 'send_at', 'time_zone', 'window_start', 'window_end', 'status', 'created_at',
  'updated_at', 'finished_at', 'stream'], 'campaigns has the expected columns');
SELECT table_owner_is('mailroom', 'campaigns', 'mailroom_owner', 'owned by mailroom_owner');
SELECT table_privs_are('mailroom', 'campaigns', 'mailroom_app', ARRAY[]::text[], 'mailroom_app has no direct access');
SELECT has_column('mailroom', 'contents', 'recipient_zone', 'contents.recipient_zone exists');
SELECT col_isnt_fk('mailroom', 'contents', 'campaign_id', 'contents.campaign_id carries no foreign key (a bulk campaign paid 27 % for it); integrity_problems() checks it');
SELECT has_index('mailroom', 'contents', 'contents_campaign_idx', 'the index on campaign_id (a recipient once: the delivery key, see table_contents)');

INSERT INTO mailroom.templates (key, subject, body_text) VALUES ('t', 's', 'b');
INSERT INTO mailroom.campaigns (name, template_key, send_at) VALUES ('c', 't', now());
INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id, recipient_id)
SELECT 'campaign:' || id || ':r1', 'a@example.org', 't', id, 'r1' FROM mailroom.campaigns WHERE name = 'c';
SELECT throws_ok($$INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id, recipient_id)
                   SELECT 'campaign:' || id || ':r1', 'a@example.org', 't', id, 'r1' FROM mailroom.campaigns WHERE name = 'c'$$,
  '23505', NULL, 'a recipient appears once per campaign');
SELECT throws_ok($$INSERT INTO mailroom.contents (delivery_key, to_address, template_key, campaign_id)
                   SELECT 'k3', 'a@example.org', 't', id FROM mailroom.campaigns WHERE name = 'c'$$,
  '23514', NULL, 'campaign mail needs a recipient_id');
SELECT throws_ok($$INSERT INTO mailroom.campaigns (name, template_key, send_at, window_start, window_end)
                   VALUES ('w', 't', now(), '08:00', '08:00')$$,
  '23514', NULL, 'an empty window is refused by the table too');
SELECT lives_ok($$INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text)
                  VALUES ('k4', 'a@example.org', 's', 'b')$$, 'mail outside campaigns is unaffected');

SELECT * FROM finish();
ROLLBACK;
