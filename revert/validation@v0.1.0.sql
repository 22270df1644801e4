-- Revert mailroom:validation from pg

BEGIN;

DROP FUNCTION mailroom._check_lease(interval);
DROP FUNCTION mailroom._check_range(text, numeric, numeric, numeric);
DROP FUNCTION mailroom._check_body(text, text);
DROP FUNCTION mailroom._check_headers(jsonb);
DROP FUNCTION mailroom._check_header_text(text, text);
DROP FUNCTION mailroom._check_address(text, text);

COMMIT;
