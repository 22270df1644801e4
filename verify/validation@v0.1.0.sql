-- Verify mailroom:validation on pg

BEGIN;

SELECT mailroom._check_address('to', 'ann@example.com');
SELECT mailroom._check_headers('{"X-Tag": "a"}');
SELECT mailroom._check_body('body_text', 'x');
SELECT mailroom._check_range('priority', 0, -100, 100);
SELECT mailroom._check_lease('1 minute');
SELECT mailroom._check_header_text('subject', 'Hi');

ROLLBACK;
