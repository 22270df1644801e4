-- Tests for mailroom:validation (the shared input checks; each caller's own
-- test shows the checks reach its users)
BEGIN;
SELECT plan(12);

SELECT lives_ok($$SELECT mailroom._check_address('to', 'ann.lee+tag@mail.example.com')$$, 'plain address');
SELECT lives_ok($$SELECT mailroom._check_address('to', 'jürgen@bücher.example')$$, 'internationalised address');
SELECT lives_ok($$SELECT mailroom._check_address('to', 'o''brien@example.com')$$, 'apostrophe in local part');
SELECT throws_ok($$SELECT mailroom._check_address('to', '.ann@example.com')$$, '22023',
  'mailroom: to: ".ann@example.com" has an invalid local part', 'leading dot');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'ann@example..com')$$, '22023',
  'mailroom: to: "ann@example..com" has an invalid domain', 'empty domain label');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'ann@')$$, '22023',
  'mailroom: to: "ann@" has an invalid domain', 'missing domain');
SELECT throws_ok($$SELECT mailroom._check_address('reply_to', E'ann@example.com\t')$$, '22023',
  'mailroom: reply_to: contains whitespace or a control character', 'the field name is the caller''s');
SELECT lives_ok($$SELECT mailroom._check_headers('{"Reply-To": "a@example.com", "List-Unsubscribe": "<mailto:u@example.com>"}')$$,
  'ordinary headers pass');
SELECT throws_ok($$SELECT mailroom._check_headers('{"X:Colon": "v"}')$$, '22023',
  'mailroom: headers: "X:Colon" is not a valid header field name', 'colon in a name');
SELECT throws_ok($$SELECT mailroom._check_headers('{"content-type": "text/html"}')$$, '22023',
  'mailroom: headers: content-type is set by mailroom and cannot be given', 'MIME structure is mailroom''s');
SELECT throws_ok($$SELECT mailroom._check_lease('-1 second')$$, '22023',
  'mailroom: lease: must be more than 0 and at most 1 day, got -00:00:01', 'negative lease');
SELECT throws_ok($$SELECT mailroom._check_range('limit', NULL, 1, 10)$$, '22023',
  'mailroom: limit: must be between 1 and 10, got NULL', 'NULL is out of range');

SELECT * FROM finish();
ROLLBACK;
