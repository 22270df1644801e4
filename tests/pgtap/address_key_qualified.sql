-- Tests for mailroom:address_key_qualified
BEGIN;
SELECT plan(6);

-- An attacker's ||(text, text), in a schema a careless DBA's search_path puts
-- before pg_catalog. It records who ran it and answers wrongly for mailroom.
CREATE SCHEMA hijack;
CREATE TABLE hijack.log (fn text, who name);
GRANT USAGE ON SCHEMA hijack TO PUBLIC;
GRANT INSERT ON hijack.log TO PUBLIC;
CREATE FUNCTION hijack.textcat(text, text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  INSERT INTO hijack.log VALUES ('||', current_user);
  RETURN CASE WHEN current_user = 'mailroom_owner' THEN 'hijacked' ELSE textcat($1, $2) END;
END $$;
CREATE OPERATOR hijack.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = hijack.textcat);

SELECT lives_ok($$SELECT mailroom.enqueue('Ann@Example.COM', 's', 'b', p_delivery_key => 'akq-1')$$,
                'a queued mail, so an index over _address_key has an entry');

SET LOCAL search_path = hijack, pg_catalog, public;
-- v0.4 keeps no index over _address_key (the claim gate compares it with
-- suppressions' key); a DBA may add one, and a session caches an index's
-- expressions, so a new index (as a restore or a DBA makes one) evaluates the
-- body afresh, as the table's owner.
CREATE INDEX akq_probe ON mailroom.contents (mailroom._address_key(to_address));
REINDEX INDEX mailroom.akq_probe;
SELECT set_config('akq.key', mailroom._address_key('Bob@Example.ORG'), true);
ANALYZE mailroom.contents;
RESET search_path;
SELECT has_index('mailroom', 'contents', 'akq_probe', 'the index over _address_key was built under the hijacking path');

SELECT is(current_setting('akq.key'), 'Bob@example.org', 'called under the hijacking path it still lowers the domain');
SELECT is_empty($$SELECT fn, who FROM hijack.log$$,
                'REINDEX, CREATE INDEX, ANALYZE and a direct call under the hijacking path never ran the planted ||');
SELECT is((SELECT count(*)::int FROM mailroom.contents
           WHERE mailroom._address_key(to_address) = 'Ann@example.com'), 1,
          'the rebuilt index still finds the mail');
SELECT is(mailroom._address_key('x.Y@Sub.Example.COM'), 'x.Y@sub.example.com', 'local part kept, domain lowered');

SELECT * FROM finish();
ROLLBACK;
