-- Verify mailroom:table_domain_limits on pg

BEGIN;

SELECT 1/count(*) FROM mailroom.domain_limits WHERE domain = '*';
DO $$
BEGIN
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.set_domain_limits(text, integer, integer)', 'execute'),
         'mailroom_operator cannot execute set_domain_limits';
  ASSERT pg_catalog.has_function_privilege('mailroom_operator', 'mailroom.delete_domain_limits(text)', 'execute'),
         'mailroom_operator cannot execute delete_domain_limits';
END
$$;

ROLLBACK;
