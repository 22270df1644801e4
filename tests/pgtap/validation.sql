-- Tests for mailroom:validation (the shared input checks; each caller's own
-- test shows the checks reach its users)
BEGIN;
SELECT plan(40);

SELECT lives_ok($$SELECT mailroom._check_address('to', 'ann.lee+tag@mail.example.com')$$, 'plain address');
SELECT lives_ok($$SELECT mailroom._check_address('to', 'jürgen@bücher.example')$$, 'internationalised address');
SELECT lives_ok($$SELECT mailroom._check_address('to', 'o''brien@example.com')$$, 'apostrophe in local part');
SELECT throws_ok($$SELECT mailroom._check_address('to', '.ann@example.com')$$, '22023',
  'mailroom: to: ".ann@example.com" has an invalid local part', 'leading dot');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'ann@example..com')$$, '22023',
  'mailroom: to: "ann@example..com" has an invalid domain', 'empty domain label');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'ann@')$$, '22023',
  'mailroom: to: "ann@" has an invalid domain', 'missing domain');
SELECT throws_ok($$SELECT mailroom._check_address('to', 'Judy <judy@example.com>')$$, '22023',
  'mailroom: to: display names and angle brackets are not accepted ("Judy <judy@example.com>"): pass the bare address, judy@example.com',
  'a display name is refused as such, naming the bare address to pass');
SELECT throws_ok($$SELECT mailroom.enqueue('"Lee, Judy" <judy@example.com> ', 'Hi', 'Body')$$, '22023',
  'mailroom: to: display names and angle brackets are not accepted (""Lee, Judy" <judy@example.com> "): pass the bare address, judy@example.com',
  '... through enqueue too, quoted names and trailing space included');
SELECT throws_ok($$SELECT mailroom._check_address('reply_to', E'ann@example.com\t')$$, '22023',
  'mailroom: reply_to: contains whitespace or a control character', 'the field name is the caller''s');
SELECT lives_ok($$SELECT mailroom._check_headers('{"Reply-To": "a@example.com", "List-Unsubscribe": "<mailto:u@example.com>"}')$$,
  'ordinary headers pass');
SELECT throws_ok($$SELECT mailroom._check_headers('{"X:Colon": "v"}')$$, '22023',
  'mailroom: headers: "X:Colon" is not a valid header field name', 'colon in a name');
SELECT throws_ok($$SELECT mailroom._check_headers('{"content-type": "text/html"}')$$, '22023',
  'mailroom: headers: "content-type" is set by mailroom (mailroom builds the MIME structure)', 'MIME structure is mailroom''s');
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

-- one mail, one recipient (rework after v0.3.0): the headers mailroom owns,
-- in any case, and one header under two names
SELECT throws_ok($$SELECT mailroom._check_headers('{"Bcc": "all@example.com"}')$$, '22023',
  'mailroom: headers: "Bcc" is set by mailroom (one mail, one recipient: enqueue one mail per recipient)',
  'Bcc: it was shown to the To recipient and never reached the envelope');
SELECT throws_ok($$SELECT mailroom._check_headers('{"X-Tag": "a", "cc": "all@example.com"}')$$, '22023',
  'mailroom: headers: "cc" is set by mailroom (one mail, one recipient: enqueue one mail per recipient)',
  'Cc, in lower case');
SELECT throws_ok($$SELECT mailroom._check_headers('{"SUBJECT": "second subject"}')$$, '22023',
  'mailroom: headers: "SUBJECT" is set by mailroom (the subject is p_subject or the template''s)',
  'a second Subject, in upper case');
SELECT throws_ok($$SELECT mailroom._check_headers('{"To": "x@example.com"}')$$, '22023',
  'mailroom: headers: "To" is set by mailroom (the recipient is p_to)', 'To');
SELECT throws_ok($$SELECT mailroom._check_headers('{"Message-Id": "<x@example.com>"}')$$, '22023',
  'mailroom: headers: "Message-Id" is set by mailroom (it derives from the delivery key)', 'Message-ID');
SELECT throws_ok($$SELECT mailroom._check_headers('{"Date": "Tue, 1 Dec 2026 08:00:00 +0000"}')$$, '22023',
  'mailroom: headers: "Date" is set by mailroom (it is the time of sending)', 'Date');
SELECT throws_ok($$SELECT mailroom._check_headers('{"Return-Path": "<bounce@example.com>"}')$$, '22023',
  'mailroom: headers: "Return-Path" is set by mailroom (the receiving server writes it from the envelope sender)',
  'Return-Path');
SELECT throws_ok($$SELECT mailroom._check_headers('{"MIME-Version": "1.0"}')$$, '22023',
  'mailroom: headers: "MIME-Version" is set by mailroom (mailroom builds the MIME structure)', 'MIME-Version');
SELECT throws_ok($$SELECT mailroom._check_headers('{"From": "a@example.com", "FROM": "b@example.com"}')$$, '22023',
  'mailroom: headers: "FROM" and "From" are the same header (header names are case-insensitive)',
  'From twice, in two cases');
SELECT throws_ok($$SELECT mailroom._check_headers('{"x-tag": "a", "X-Tag": "b"}')$$, '22023',
  'mailroom: headers: "X-Tag" and "x-tag" are the same header (header names are case-insensitive)',
  'any header twice, in two cases');
SELECT lives_ok($$SELECT mailroom._check_headers('{"FROM": "Sales <sales@example.com>", "Reply-To": "help@example.com", "Sender": "s@example.com", "List-Unsubscribe": "<https://example.com/u>", "X-Bcc-Note": "not a Bcc"}')$$,
  'From once (in any case), Reply-To, Sender, List-Unsubscribe and names that only contain an owned one pass');

-- Both callers refuse before writing anything.
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"Bcc": "all@example.com"}')$$, '22023',
  'mailroom: headers: "Bcc" is set by mailroom (one mail, one recipient: enqueue one mail per recipient)',
  'enqueue refuses a Bcc');
SELECT mailroom.upsert_template('validation-t', 'Hi', 'Body');
SELECT throws_ok($$SELECT mailroom.enqueue_campaign('validation campaign', 'validation-t',
                     $q$SELECT 'r1' AS recipient_id, 'dee@example.com' AS email$q$, p_headers => '{"CC": "all@example.com"}')$$,
  '22023', 'mailroom: headers: "CC" is set by mailroom (one mail, one recipient: enqueue one mail per recipient)',
  'enqueue_campaign refuses a Cc');
SELECT is((SELECT count(*)::int FROM mailroom.messages) + (SELECT count(*)::int FROM mailroom.campaigns), 0,
  'nothing was written');

SELECT * FROM finish();
ROLLBACK;
