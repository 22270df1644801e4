-- Tests for mailroom:roles
BEGIN;
SELECT plan(9);

SELECT has_role('mailroom_owner', 'owner role exists');
SELECT has_role('mailroom_app', 'app role exists');
SELECT has_role('mailroom_runner', 'runner role exists');
SELECT has_role('mailroom_operator', 'operator role exists');
-- The group roles the plan makes (a login an operator makes for the console,
-- such as mailroom_console, is not one of them).
SELECT is((SELECT count(*)::int FROM pg_roles
           WHERE rolname IN ('mailroom_owner', 'mailroom_app', 'mailroom_runner', 'mailroom_operator',
                             'mailroom_feedback', 'mailroom_unsubscribe', 'mailroom_submission') AND (rolcanlogin OR rolsuper)), 0,
          'no mailroom role can log in or is a superuser');
SELECT ok(has_schema_privilege('mailroom_app', 'mailroom', 'usage'), 'app may use the schema');
SELECT ok(has_schema_privilege('mailroom_runner', 'mailroom', 'usage'), 'runner may use the schema');
SELECT ok(has_schema_privilege('mailroom_operator', 'mailroom', 'usage'), 'operator may use the schema');
-- No function in the schema is executable by PUBLIC.
SELECT is_empty($$
  SELECT p.oid::regprocedure::text FROM pg_proc p
  WHERE p.pronamespace = 'mailroom'::regnamespace
    AND has_function_privilege('public', p.oid, 'execute')
$$, 'EXECUTE is revoked from PUBLIC on every mailroom function');

SELECT * FROM finish();
ROLLBACK;
