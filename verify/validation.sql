-- Verify mailroom:validation on pg

BEGIN;

SELECT mailroom._check_address('to', 'ann@example.com');
SELECT mailroom._check_headers('{"X-Tag": "a"}');
SELECT mailroom._check_body('body_text', 'x');
SELECT mailroom._check_range('priority', 0, -100, 100);
SELECT mailroom._check_lease('1 minute');
SELECT mailroom._check_header_text('subject', 'Hi');

-- The reworked checks are in place: a dotless domain, a control character,
-- a Bcc header and one header under two names are refused.
DO $$
BEGIN
  BEGIN
    PERFORM mailroom._check_address('to', 'ann@localhost');
    RAISE EXCEPTION 'validation: a dotless domain was accepted';
  EXCEPTION WHEN invalid_parameter_value THEN NULL;
  END;
  BEGIN
    PERFORM mailroom._check_headers('{"bcc": "all@example.com"}');
    RAISE EXCEPTION 'validation: a Bcc header was accepted';
  EXCEPTION WHEN invalid_parameter_value THEN NULL;
  END;
  BEGIN
    PERFORM mailroom._check_headers('{"From": "a@example.com", "FROM": "b@example.com"}');
    RAISE EXCEPTION 'validation: one header under two names was accepted';
  EXCEPTION WHEN invalid_parameter_value THEN NULL;
  END;
  BEGIN
    PERFORM mailroom._check_header_text('subject', E'a\x0bb');
    RAISE EXCEPTION 'validation: a control character in header text was accepted';
  EXCEPTION WHEN invalid_parameter_value THEN NULL;
  END;
END
$$;

ROLLBACK;
