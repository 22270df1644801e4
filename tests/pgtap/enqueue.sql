-- Tests for mailroom:enqueue
BEGIN;
SELECT plan(54);
SET LOCAL client_min_messages = warning;
TRUNCATE mailroom.queue, mailroom.contents, mailroom.attempts;
TRUNCATE mailroom.suppressions;

-- Contract
SELECT has_function('mailroom', 'enqueue',
  ARRAY['text', 'text', 'text', 'text', 'jsonb', 'text', 'timestamp with time zone', 'integer', 'text',
        'integer', 'text', 'jsonb', 'text', 'text'], 'enqueue exists with its full signature');
SELECT is_definer('mailroom', 'enqueue',
  ARRAY['text', 'text', 'text', 'text', 'jsonb', 'text', 'timestamp with time zone', 'integer', 'text',
        'integer', 'text', 'jsonb', 'text', 'text'], 'enqueue is SECURITY DEFINER');
SELECT ok((SELECT proconfig @> ARRAY['search_path=mailroom, pg_temp'] FROM pg_proc
           WHERE oid = 'mailroom.enqueue(text, text, text, text, jsonb, text, timestamptz, integer, text, integer, text, jsonb, text, text)'::regprocedure),
  'enqueue pins its search_path');
SELECT function_privs_are('mailroom', 'enqueue',
  ARRAY['text', 'text', 'text', 'text', 'jsonb', 'text', 'timestamp with time zone', 'integer', 'text',
        'integer', 'text', 'jsonb', 'text', 'text'], 'mailroom_app', ARRAY['EXECUTE'], 'apps may enqueue');
SELECT function_privs_are('mailroom', 'enqueue',
  ARRAY['text', 'text', 'text', 'text', 'jsonb', 'text', 'timestamp with time zone', 'integer', 'text',
        'integer', 'text', 'jsonb', 'text', 'text'], 'mailroom_runner', ARRAY[]::text[], 'runners may not enqueue');

-- Behaviour
SELECT isnt(mailroom.enqueue('a@example.com', 'Hi', 'Body'), NULL, 'three arguments are enough');
SELECT results_eq(
  $$SELECT status, priority, sender, attempts, max_attempts, on_ambiguous, delivery_key LIKE 'mailroom:%'
    FROM mailroom.messages WHERE to_address = 'a@example.com'$$,
  $$VALUES ('queued'::text, 0::smallint, 'default'::text, 0, 5, 'retry'::text, true)$$,
  'defaults: queued, priority 0, default sender, 5 attempts, retry on ambiguity, a generated key');

SELECT is(mailroom.enqueue('b@example.com', 'Hi', 'Body', p_delivery_key => 'order-1:receipt'),
          mailroom.enqueue('b@example.com', 'Changed', 'Other body', p_delivery_key => 'order-1:receipt'),
          'the same delivery key returns the same id');
SELECT results_eq($$SELECT count(*)::int, min(subject) FROM mailroom.messages WHERE delivery_key = 'order-1:receipt'$$,
  $$VALUES (1, 'Hi'::text)$$, 'and the repeat changed nothing');

SELECT mailroom.enqueue('c@example.com', 'Later', 'Body', p_send_at => '2030-06-01Z', p_priority => 7,
  p_sender => 'billing', p_max_attempts => 3, p_headers => '{"Reply-To": "help@example.com"}',
  p_on_ambiguous => 'review', p_delivery_key => 'c-1');
SELECT results_eq(
  $$SELECT run_at, priority, sender, max_attempts, headers, on_ambiguous FROM mailroom.messages WHERE delivery_key = 'c-1'$$,
  $$VALUES ('2030-06-01Z'::timestamptz, 7::smallint, 'billing'::text, 3, '{"Reply-To": "help@example.com"}'::jsonb, 'review'::text)$$,
  'named parameters are stored');

SELECT mailroom.upsert_template('welcome', 'Hello {{ name }}', 'Hi {{ name }}');
SELECT mailroom.enqueue('d@example.com', p_template => 'welcome', p_vars => '{"name": "Dee"}', p_delivery_key => 'd-1');
SELECT results_eq($$SELECT template_key, template_vars, subject FROM mailroom.messages WHERE delivery_key = 'd-1'$$,
  $$VALUES ('welcome'::text, '{"name": "Dee"}'::jsonb, NULL::text)$$, 'a templated message keeps key and vars');

INSERT INTO mailroom.suppressions (address_key, address, reason) VALUES ('gone@example.com', 'gone@example.com', 'unsubscribed');
SELECT mailroom.enqueue('gone@EXAMPLE.com', 'Hi', 'Body', p_delivery_key => 'gone-1');
SELECT results_eq($$SELECT status, status_reason FROM mailroom.messages WHERE delivery_key = 'gone-1'$$,
  $$VALUES ('cancelled'::text, 'suppressed'::text)$$,
  'mail to a suppressed address (domain in any case) is recorded as cancelled, without an error');

-- Bad input: each case raises 22023 naming the field, and writes nothing.
CREATE TEMP TABLE before_errors AS SELECT count(*) AS n FROM mailroom.messages;
SELECT throws_ok($$SELECT mailroom.enqueue(NULL, 'Hi', 'Body')$$, '22023',
  'mailroom: to: an email address is required', 'NULL recipient');
SELECT throws_ok($$SELECT mailroom.enqueue('not-an-address', 'Hi', 'Body')$$, '22023',
  'mailroom: to: "not-an-address" is not an email address (no @)', 'recipient without @');
SELECT throws_ok($$SELECT mailroom.enqueue('ann lee@example.com', 'Hi', 'Body')$$, '22023',
  'mailroom: to: contains whitespace or a control character', 'recipient with whitespace');
SELECT throws_ok($$SELECT mailroom.enqueue(E'ann@example.com\r\nBcc: all@example.com', 'Hi', 'Body')$$, '22023',
  'mailroom: to: contains CR or LF', 'recipient with CR/LF');
SELECT throws_ok($$SELECT mailroom.enqueue('a' || chr(0) || '@example.com', 'Hi', 'Body')$$, '54000',
  'null character not permitted', 'NUL cannot even reach enqueue: PostgreSQL text has no NUL');
SELECT throws_ok($$SELECT mailroom.enqueue(repeat('a', 60) || '@' || repeat('b', 190) || '.com', 'Hi', 'Body')$$, '22023',
  'mailroom: to: longer than 254 characters', 'recipient over 254 characters');
SELECT throws_ok($$SELECT mailroom.enqueue(repeat('a', 65) || '@example.com', 'Hi', 'Body')$$, '22023',
  'mailroom: to: local part longer than 64 characters', 'local part over 64 characters');
SELECT throws_ok($$SELECT mailroom.enqueue('a@b@example.com', 'Hi', 'Body')$$, '22023',
  'mailroom: to: "a@b@example.com" has more than one @', 'two @');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@-example.com', 'Hi', 'Body')$$, '22023',
  'mailroom: to: "ann@-example.com" has an invalid domain', 'bad domain');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', NULL, 'Body')$$, '22023',
  'mailroom: subject: required unless a template is given', 'missing subject');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi')$$, '22023',
  'mailroom: body_text: a text or HTML body is required unless a template is given', 'missing body');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', E'Hi\r\nBcc: all@example.com', 'Body')$$, '22023',
  'mailroom: subject: contains CR or LF (header injection)', 'subject with CR/LF');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"X-Tag": "a\nBcc: x@example.com"}')$$, '22023',
  'mailroom: headers.X-Tag: contains CR or LF (header injection)', 'header value with LF');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"Bad Name": "v"}')$$, '22023',
  'mailroom: headers: "Bad Name" is not a valid header field name', 'header name with a space');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"Message-ID": "<x@y>"}')$$, '22023',
  'mailroom: headers: "Message-ID" is set by mailroom (it derives from the delivery key)', 'Message-ID is mailroom''s');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"date": "today"}')$$, '22023',
  'mailroom: headers: "date" is set by mailroom (it is the time of sending)', 'Date is mailroom''s, in any case');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"To": "x@example.com"}')$$, '22023',
  'mailroom: headers: "To" is set by mailroom (the recipient is p_to)', 'To is mailroom''s');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '["X-Tag"]')$$, '22023',
  'mailroom: headers: must be a JSON object of header name to text value', 'headers not an object');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"X-Count": 3}')$$, '22023',
  'mailroom: headers.X-Count: value must be a string, got number', 'header value not a string');
UPDATE mailroom.settings SET value = '10' WHERE key = 'max_body_bytes';
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'eleven byte')$$, '22023',
  'mailroom: body_text: 11 bytes is over the maximum of 10 bytes', 'text body over the configured maximum');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'ok', '<p>too long</p>')$$, '22023',
  'mailroom: body_html: 15 bytes is over the maximum of 10 bytes', 'HTML body over the configured maximum');
UPDATE mailroom.settings SET value = '1048576' WHERE key = 'max_body_bytes';
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_priority => 101)$$, '22023',
  'mailroom: priority: must be between -100 and 100, got 101', 'priority out of range');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_max_attempts => 0)$$, '22023',
  'mailroom: max_attempts: must be between 1 and 100, got 0', 'max_attempts out of range');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_on_ambiguous => 'guess')$$, '22023',
  'mailroom: on_ambiguous: must be retry or review, got guess', 'unknown ambiguity policy');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_sender => 'two words')$$, '22023',
  'mailroom: sender: "two words" is not a sender name (letters, digits and _ . : -, at most 64)', 'bad sender name');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_delivery_key => '')$$, '22023',
  'mailroom: delivery_key: must be 1 to 255 characters without control characters', 'empty delivery key');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', p_template => 'nope')$$, '22023',
  'mailroom: template: no template named "nope"', 'unknown template');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', p_template => 'welcome')$$, '22023',
  'mailroom: template: give either a template or subject and body, not both', 'template and literal content');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', p_template => 'welcome', p_vars => '[1]')$$, '22023',
  'mailroom: vars: must be a JSON object', 'vars not an object');
SELECT is((SELECT count(*) FROM mailroom.messages), (SELECT n FROM before_errors), 'no refused call wrote a row');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_priority => NULL)$$, '22023',
  'mailroom: priority: must be between -100 and 100, got NULL', 'NULL priority (the inline check defers to _check_range)');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => NULL)$$, '22023',
  'mailroom: headers: must be a JSON object of header name to text value', 'NULL headers');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => '{"X-Tag": "a\r\nBcc: x@y.org"}')$$, '22023',
  'mailroom: headers.X-Tag: contains CR or LF (header injection)', 'a header value with CR LF');
SELECT throws_ok($$SELECT mailroom.enqueue('ann@' || repeat('a', 64) || '.com', 'Hi', 'Body')$$, '22023',
  'mailroom: to: "ann@' || repeat('a', 64) || '.com" has an invalid domain', 'a 64-character domain label');

-- addresses the fast inline check does not take still reach the full rule
SELECT lives_ok($$SELECT mailroom.enqueue('jörg@exämple.org', 'Hi', 'Body')$$, 'a non-ASCII address is accepted (SMTPUTF8)');
SELECT lives_ok($$SELECT mailroom.enqueue('ann@' || repeat('a', 63) || '.com', 'Hi', 'Body')$$, 'a 63-character domain label is accepted');

-- Roles
SET LOCAL ROLE mailroom_app;
SELECT lives_ok($$SELECT mailroom.enqueue('app@example.com', 'Hi', 'Body')$$, 'the app role can enqueue');
SELECT throws_ok($$SELECT * FROM mailroom.messages$$, '42501', 'permission denied for view messages',
  'the app role cannot read messages');
SELECT throws_ok($$SELECT * FROM mailroom.claim_batch('w', 1)$$, '42501', 'permission denied for function claim_batch',
  'the app role cannot claim');
RESET ROLE;
SET LOCAL ROLE mailroom_runner;
SELECT throws_ok($$SELECT mailroom.enqueue('runner@example.com', 'Hi', 'Body')$$, '42501',
  'permission denied for function enqueue', 'the runner role cannot enqueue');
RESET ROLE;

-- enqueue tests the subject inline and calls _check_header_text only for a
-- subject that fails: both must refuse exactly the same subjects.
CREATE FUNCTION pg_temp.subject_refused(p_subject text, p_by_enqueue boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF p_by_enqueue THEN
    PERFORM mailroom.enqueue('ann@example.com', p_subject, 'Body');
  ELSE
    PERFORM mailroom._check_header_text('subject', p_subject);
  END IF;
  RETURN false;
EXCEPTION WHEN invalid_parameter_value THEN
  RETURN true;
END
$$;
SELECT is((SELECT array_agg(cp ORDER BY cp) FROM (
             SELECT cp FROM generate_series(1, 255) cp UNION ALL SELECT cp FROM generate_series(8192, 8240) cp
             UNION ALL SELECT unnest(ARRAY[12288, 65279, 65533])) c
           WHERE pg_temp.subject_refused('Hi ' || chr(cp) || ' there', true)
                 IS DISTINCT FROM pg_temp.subject_refused('Hi ' || chr(cp) || ' there', false)),
          NULL, 'enqueue refuses a subject with a given character exactly when _check_header_text does');
SELECT is(ARRAY[pg_temp.subject_refused(repeat('s', 65536), true), pg_temp.subject_refused(repeat('s', 65537), true)],
          ARRAY[false, true], 'a subject of 64 KiB is taken, one byte more is refused');

SELECT * FROM finish();
ROLLBACK;
