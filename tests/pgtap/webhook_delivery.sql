-- Tests for mailroom:webhook_delivery (delivery itself: tests/test_event_webhooks.py)
BEGIN;
SELECT plan(8);
SET LOCAL client_min_messages = warning;

SELECT lives_ok($$SELECT mailroom.webhook_endpoint_set('pgtap', 'https://hooks.example.com/in', 'hooks', p_max_failures => 2, p_from_start => true)$$,
  'an endpoint is set');
SELECT mailroom.suppress('pgtap-hook@example.com');
-- (The suppression's transaction is this one: nothing to claim until it commits.)
SELECT is((SELECT count(*)::int FROM mailroom.webhook_claim('w', ARRAY['hooks'])), 0, 'nothing committed, nothing claimed');
UPDATE mailroom.webhook_endpoints SET lease_token = '00000000-0000-0000-0000-000000000001', leased_until = now() + interval '1 minute'
WHERE name = 'pgtap';
SELECT is(mailroom.webhook_report('pgtap', '00000000-0000-0000-0000-000000000001', NULL, 0, 'HTTP 500', interval '1 second'),
  'active', 'one failure: still active');
UPDATE mailroom.webhook_endpoints SET lease_token = '00000000-0000-0000-0000-000000000002', leased_until = now() + interval '1 minute'
WHERE name = 'pgtap';
SELECT is(mailroom.webhook_report('pgtap', '00000000-0000-0000-0000-000000000002', NULL, 0, 'HTTP 500', interval '1 second'),
  'paused', 'max_failures in a row: paused');
SELECT is((SELECT paused_reason FROM mailroom.webhook_status WHERE name = 'pgtap'), '2 failures in a row; the last: HTTP 500',
  'why, in webhook_status');
SELECT is(mailroom.webhook_report('pgtap', '00000000-0000-0000-0000-000000000002', NULL, 0), 'lost', 'a lease used once is gone');
SELECT lives_ok($$SELECT mailroom.webhook_endpoint_resume('pgtap')$$, 'resumed');
SELECT throws_ok($$SELECT mailroom.webhook_endpoint_pause('nope')$$, '22023', 'mailroom: name: no webhook endpoint "nope"',
  'an unknown endpoint is named');

SELECT * FROM finish();
ROLLBACK;
