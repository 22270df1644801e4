-- No clock on anything a role can execute (issue 13, item 4; the contract's
-- "Clock" rule). A caller that could pass p_now could claim mail due next
-- month with a lease that ends in 2100, reclaim every live lease, or open any
-- rate-limit window it liked. Public functions use the database clock, now();
-- where tests need a pinned clock the implementation is an owner-only twin
-- _name(..., p_now timestamptz DEFAULT now()) without any GRANT.
-- No Sqitch change of its own: it checks the whole deployed schema, so a new
-- function that breaks the rule fails here whoever adds it.
BEGIN;
SET LOCAL search_path = public, pg_catalog;  -- pgTAP lives in public
SELECT plan(4);

CREATE TEMP VIEW role_fns AS
  SELECT p.oid, p.proname::text AS name, p.oid::regprocedure::text AS fn,
         'p_now' = ANY (p.proargnames) AS takes_p_now,
         coalesce(array_agg(r.role ORDER BY r.role) FILTER (WHERE pg_catalog.has_function_privilege(r.role, p.oid, 'EXECUTE')),
                  '{}') AS executable_by
  FROM pg_catalog.pg_proc p
  CROSS JOIN (VALUES ('mailroom_app'), ('mailroom_runner'), ('mailroom_operator'), ('public')) AS r(role)
  WHERE p.pronamespace = 'mailroom'::regnamespace
  GROUP BY p.oid;

SELECT ok((SELECT count(*) FROM role_fns WHERE cardinality(executable_by) > 0) > 20,
          'the roles can execute mailroom functions (the checks below look at something)');

SELECT is_empty($$
  SELECT fn, executable_by FROM role_fns WHERE takes_p_now AND cardinality(executable_by) > 0 ORDER BY fn
$$, 'no function mailroom_app, mailroom_runner, mailroom_operator or PUBLIC may execute has an argument p_now');

SELECT is_empty($$
  SELECT fn, executable_by FROM role_fns
  WHERE name LIKE '\_%' AND takes_p_now AND cardinality(executable_by) > 0 ORDER BY fn
$$, 'every _name function that takes p_now is executable by none of the three roles nor PUBLIC');

-- A twin is _name of a public name: the same arguments plus p_now timestamptz
-- as the last one, and the public function takes no p_now.
SELECT is_empty($$
  SELECT t.oid::regprocedure::text AS twin
  FROM pg_catalog.pg_proc t
  WHERE t.pronamespace = 'mailroom'::regnamespace AND t.proname LIKE '\_%' AND 'p_now' = ANY (t.proargnames)
    AND EXISTS (SELECT FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace = t.pronamespace AND p.proname = substr(t.proname, 2))
    AND NOT EXISTS (
      SELECT FROM pg_catalog.pg_proc p
       WHERE p.pronamespace = t.pronamespace AND p.proname = substr(t.proname, 2)
         AND NOT coalesce('p_now' = ANY (p.proargnames), false)
         AND t.proargtypes::oid[] = p.proargtypes::oid[] || 'timestamptz'::regtype::oid
         AND t.proargnames[t.pronargs] = 'p_now'
         AND t.pronargdefaults >= 1)
  ORDER BY 1
$$, 'every twin _name(..., p_now) has a public name(...) with the same arguments and no p_now, p_now last with a default');

SELECT * FROM finish();
ROLLBACK;
