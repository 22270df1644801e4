"""The recipe of docs/security.md for deploying as a role that is not a
superuser: a LOGIN CREATEROLE role owning a fresh database runs
db/prepare_deployer.sql once, then `sqitch deploy`; the three group roles
then work for logins it creates (an application enqueues, a runner claims
and reports, an operator reads the views and inspects)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from tests.conftest import connect, with_database
from tests.operatorkit import as_user

ROOT = Path(__file__).resolve().parent.parent


def _deploy(url: str) -> subprocess.CompletedProcess:
    """`sqitch deploy` as the URL's role. Without the verify scripts: they only
    read the catalog, as the template deploy runs them, and they would add a
    third to the time of this test."""
    target = "db:pg:" + url.split(":", 1)[1]
    return subprocess.run(["sqitch", "deploy", "--no-verify", "--target", target],
                          cwd=ROOT, capture_output=True, text=True)


def test_a_createrole_deployer_that_is_no_superuser_deploys_and_the_three_roles_work(server_url):
    tag = uuid.uuid4().hex[:8]
    deployer, database = f"t_deployer_{tag}", f"t_nsu_{tag}"
    app, runner, operator = (f"t_{kind}_{tag}" for kind in ("app", "runner", "operator"))
    with connect(server_url) as admin:  # what the DBA does: a role and a database, nothing of mailroom
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(deployer)))
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(deployer)))
    try:
        url = with_database(server_url, database)
        deployer_url = as_user(url, deployer)

        # Without the preparation PostgreSQL refuses to hand the schema to mailroom_owner.
        refused = _deploy(deployer_url)
        assert refused.returncode != 0 and 'must be member of role "mailroom_owner"' in refused.stdout + refused.stderr

        with connect(deployer_url) as dep:
            assert not dep.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()["rolsuper"]
            dep.execute((ROOT / "db" / "prepare_deployer.sql").read_text())
        deployed = _deploy(deployer_url)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr

        with connect(deployer_url) as dep:  # the logins, made by the deployer (CREATEROLE) as the docs say
            for login, group in ((app, "mailroom_app"), (runner, "mailroom_runner"), (operator, "mailroom_operator")):
                dep.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(sql.Identifier(login), sql.Identifier(group)))
            owners = dep.execute(
                "SELECT DISTINCT pg_get_userbyid(proowner) AS owner FROM pg_proc"
                " WHERE pronamespace = 'mailroom'::regnamespace").fetchall()
            assert owners == [{"owner": "mailroom_owner"}]

        with connect(as_user(url, app)) as c:
            mail = c.execute("SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_delivery_key => 'nsu-1') AS id"
                             ).fetchone()["id"]
        with connect(as_user(url, runner)) as c:
            (claimed,) = c.execute("SELECT id, lease_token FROM mailroom.claim_batch('nsu-runner', 10)").fetchall()
            assert claimed["id"] == mail
            report = [{"id": mail, "token": str(claimed["lease_token"]), "outcome": "sent", "smtp_code": 250}]
            assert c.execute("SELECT mailroom.mark_outcomes(%s) AS n", [Jsonb(report)]).fetchone()["n"] == 1
        with connect(as_user(url, operator)) as c:
            assert c.execute("SELECT mailroom.inspect('nsu-1') ->> 'status' AS s").fetchone()["s"] == "sent"
            c.execute("SELECT * FROM mailroom.queue_stats").fetchall()
            assert c.execute("SELECT count(*) AS n FROM mailroom.delivered_keys WHERE delivery_key = 'nsu-1'"
                             ).fetchone()["n"] == 1
            try:
                c.execute("SELECT mailroom.enqueue('bob@example.com', 's', 'b')")
                raise AssertionError("an operator login could enqueue")
            except psycopg.errors.InsufficientPrivilege:
                pass
    finally:
        with connect(server_url) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
            for role in (app, runner, operator, deployer):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
