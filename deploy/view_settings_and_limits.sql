-- Deploy mailroom:view_settings_and_limits to pg
-- requires: table_settings
-- requires: settings_operations
-- requires: table_senders
-- requires: table_domain_limits

-- Operators may change settings (set_setting) and send rates
-- (set_sender_limits, set_domain_limits) but, with no privilege on any
-- table, could not read them back: `SELECT * FROM mailroom.settings` is
-- permission denied. Two read-only views give them exactly those rows.

BEGIN;

CREATE VIEW mailroom.current_settings WITH (security_barrier) AS
SELECT s.key, s.value, s.description
FROM mailroom.settings s;
ALTER VIEW mailroom.current_settings OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.current_settings FROM PUBLIC;
GRANT SELECT ON mailroom.current_settings TO mailroom_operator;
COMMENT ON VIEW mailroom.current_settings IS
  'Operators: every setting with its value and meaning, as set_setting() left it (the settings table itself is private).';

CREATE VIEW mailroom.send_limits WITH (security_barrier) AS
SELECT 'sender'::text AS kind, s.name, s.max_per_second, s.max_per_minute, s.updated_at
FROM mailroom.senders s
UNION ALL
SELECT 'domain'::text, d.domain, d.max_per_second, d.max_per_minute, d.updated_at
FROM mailroom.domain_limits d;
ALTER VIEW mailroom.send_limits OWNER TO mailroom_owner;
REVOKE ALL ON mailroom.send_limits FROM PUBLIC;
GRANT SELECT ON mailroom.send_limits TO mailroom_operator;
COMMENT ON VIEW mailroom.send_limits IS
  'Operators: the send rates claim_batch obeys, as set_sender_limits() and set_domain_limits() left them: kind sender (name = the sender; none listed = unlimited) or domain (name = the recipient domain, * = the default for every domain without a row of its own); NULL = no limit for that window.';

COMMIT;
