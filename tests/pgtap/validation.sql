-- Tests for mailroom:validation (the shared input checks; each caller's own
-- test shows the checks reach its users)
BEGIN;
SELECT plan(24);

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

-- hostile input (rework after v0.1.0)
SELECT lives_ok($$SELECT mailroom._check_address('to', 'user@xn--nicode-2ya.de')$$, 'an A-label domain');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'root@localhost')$$, '22023',
  'mailroom: to: "root@localhost" has no dot in its domain (a fully qualified domain is required)', 'dotless domain');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'ann@192.0.2.1')$$, '22023',
  'mailroom: to: "ann@192.0.2.1" has a top-level domain that does not end in a letter', 'an IP address as domain');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'ann@ab--cd.example')$$, '22023',
  'mailroom: to: "ann@ab--cd.example" has a domain label with "--" in the 3rd and 4th position that is not an xn-- label', 'reserved label');
SELECT throws_ok($$SELECT mailroom._check_address('to', E'ann@exam\u200Bple.com')$$, '22023',
  'mailroom: to: contains an invisible, format or private-use character (U+200B)', 'zero-width space');
SELECT throws_ok($$SELECT mailroom._check_address('to', E'ann\u00A0lee@example.com')$$, '22023',
  'mailroom: to: contains an invisible, format or private-use character (U+00A0)', 'no-break space');
SELECT throws_ok($$SELECT mailroom._check_address('to', repeat('a', 60) || '@' || repeat(repeat('ü', 40) || '.', 3) || 'de')$$, '22023',
  'mailroom: to: longer than 254 bytes in UTF-8 (306 bytes)', 'over 254 octets though under 254 characters');
SELECT throws_ok($$SELECT mailroom._check_address('to', repeat('ü', 40) || '@example.com')$$, '22023',
  'mailroom: to: local part longer than 64 bytes in UTF-8 (80 bytes)', 'local part over 64 octets');
SELECT throws_ok($$SELECT mailroom._check_header_text('subject', E'Hi\x0bthere')$$, '22023',
  'mailroom: subject: contains a control character (only TAB is allowed in a header)', 'vertical tab in header text');
SELECT lives_ok($$SELECT mailroom._check_header_text('subject', E'Hi\tthere')$$, 'TAB is allowed in header text');
SELECT throws_ok($$SELECT mailroom._check_header_text('subject', repeat('x', 65537))$$, '22023',
  'mailroom: subject: 65537 bytes is over the maximum of 65536 bytes for a header', 'a header over 64 KiB');
SELECT throws_ok($$SELECT mailroom._check_headers(jsonb_build_object('X-A', repeat('x', 40000), 'X-B', repeat('y', 40000)))$$, '22023',
  'mailroom: headers: 80022 bytes in all is over the maximum of 65536 bytes', 'all headers over 64 KiB');

SELECT * FROM finish();
ROLLBACK;
