-- Verify mailroom:address_wire_form on pg

BEGIN;

SELECT 1/(mailroom._address_key(U&'ann@\FF45\FF58\FF41\FF4D\FF50\FF4C\FF45.com') = 'ann@example.com')::int;
SELECT 1/(mailroom._address_key(U&'bob@\00DCnicode.de') = 'bob@xn--nicode-2ya.de')::int;
SELECT 1/(mailroom._wire_address('Ann@Example.COM') = 'Ann@Example.COM')::int;
SELECT 1 / count(*) FROM pg_catalog.pg_trigger
WHERE tgrelid = 'mailroom.contents'::regclass AND tgname = 'contents_wire_address' AND NOT tgisinternal;

ROLLBACK;
