"""The console pointed at a fleet directory (`mailroom web --fleet-dsn`), over
real HTTP: a directory over two cloned shards (tests/fleetkit.py, real
PL/Proxy), the console started as a subprocess (tests/operatorkit.start_web)
as a login that holds mailroom_fleet_operator only. The Fleet page shows
every shard from shard_status(): its queue numbers when it answers, DOWN
with its error when it does not (the other still answers), and the total of
those that answered. A real headless browser checks the page once."""

from __future__ import annotations

import os
import re
import shutil
import threading
import uuid
from contextlib import contextmanager
from html.parser import HTMLParser

import pytest
from psycopg import sql
from werkzeug.serving import make_server

from mailroom import exitcodes
from mailroom.web import console as console_app
from mailroom.web.console.auth import Accounts, hash_password
from tests.conftest import connect
from tests.fleetkit import build_fleet
from tests.operatorkit import as_user, run, start_web
from tests.runnerkit import enqueue
from tests.test_console_browser import CHROMEDRIVER, CHROMIUM, PASSWORD, USER, browser, login, request, shoot  # noqa: F401
from tests.test_fleet_shards import _silent_listener

METRICS = ("messages", "due", "queued", "sending", "paused", "review", "warnings")


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db) as f:
        yield f


def _login_role(url: str, *groups: str) -> str:
    name = f"t_fleet_console_{uuid.uuid4().hex[:8]}"
    with connect(url) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
            sql.Identifier(name), sql.SQL(", ").join(map(sql.Identifier, groups))))
    return name


@pytest.fixture(scope="module")
def directory_login(fleet):
    """The directory as a login that holds mailroom_fleet_operator and nothing more."""
    name = _login_role(fleet.directory, "mailroom_fleet_operator")
    yield as_user(fleet.directory, name)
    with connect(fleet.directory) as c:
        c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet-console") / "users"
    path.write_text(f"{USER}:{hash_password(PASSWORD)}\n")
    return path


@contextmanager
def _web(dsn, users, *options):
    proc, port = start_web(dsn, users, *options, "--port", "0")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stderr.close()


def _signed_in(console: str) -> str:
    """The session cookie of a signed-in operator (the login form, as a browser posts it)."""
    _, headers, body = request(console, "GET", "/login")
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    token = re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)
    status, headers, _ = request(console, "POST", "/login", {"csrf_token": token, "username": USER,
                                                             "password": PASSWORD}, cookie=cookie)
    assert status == 302
    return headers["Set-Cookie"].split(";", 1)[0]


class _FleetPage(HTMLParser):
    """The Fleet page's table: per shard its state, metrics and error; the total row."""

    def __init__(self, html: str):
        super().__init__()
        self.shards: dict[str, dict] = {}
        self.total: dict[str, int] = {}
        self.nav: list[str] = []
        self._row: dict | None = None
        self._cell: str | None = None
        self._in_nav = self._in_link = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "nav":
            self._in_nav = True
        elif tag == "a" and self._in_nav:
            self._in_link = True
        elif tag == "tr" and "data-shard" in a:
            self._row = self.shards.setdefault(a["data-shard"], {"state": a["data-state"]})
        elif tag == "tr" and a.get("id") == "fleet-total":
            self._row = self.total
        elif tag == "td" and self._row is not None and ("data-metric" in a or "data-field" in a):
            self._cell = a.get("data-metric") or a["data-field"]

    def handle_endtag(self, tag):
        if tag == "nav":
            self._in_nav = False
        elif tag == "a":
            self._in_link = False
        elif tag == "tr":
            self._row = None
        elif tag == "td":
            self._cell = None

    def handle_data(self, data):
        if self._in_link and data.strip():
            self.nav.append(data.strip())
        if self._row is not None and self._cell:
            value = data.strip()
            self._row[self._cell] = int(value) if value.isdigit() else self._row.get(self._cell, "") + value


def _fleet_page(console: str, cookie: str) -> _FleetPage:
    status, _, body = request(console, "GET", "/fleet", cookie=cookie)
    assert status == 200, body
    return _FleetPage(body)


def _shard_status(fleet) -> dict[str, dict]:
    with fleet.call() as c:
        return {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.shard_status()")}


def test_the_fleet_page_shows_every_shard_and_marks_the_one_down(fleet, directory_login, users):
    a, b = fleet.names
    with fleet.shard(a) as sa, fleet.shard(b) as sb:
        enqueue(sa, "page-a@example.com", subject="s", body_text="b")
        for i in range(2):
            enqueue(sb, f"page-b{i}@example.com", subject="s", body_text="b")
    with _web(None, users, "--fleet-dsn", directory_login) as console:
        status, headers, _ = request(console, "GET", "/fleet")
        assert status == 302 and headers["Location"].startswith("/login")   # signed-in operators only
        cookie = _signed_in(console)
        status, headers, _ = request(console, "GET", "/", cookie=cookie)
        assert status == 302 and headers["Location"] == "/fleet"   # the directory alone: its page is home
        assert request(console, "GET", "/campaigns", cookie=cookie)[0] == 404

        page = _fleet_page(console, cookie)
        expected = _shard_status(fleet)
        assert page.nav == ["Fleet"]
        assert sorted(page.shards) == sorted([a, b])
        for name, row in page.shards.items():
            assert row["state"] == "up" and {m: row[m] for m in METRICS} == {m: expected[name][m] for m in METRICS}
        assert {m: page.total[m] for m in METRICS} == {m: sum(r[m] for r in expected.values()) for m in METRICS}
        assert page.shards[b]["messages"] >= 2 and page.shards[a]["messages"] >= 1

        with fleet.shard_down(b) as port:
            page = _fleet_page(console, cookie)
            body = request(console, "GET", "/fleet", cookie=cookie)[2]
        assert page.shards[a]["state"] == "up" and page.shards[a]["messages"] == expected[a]["messages"]
        down = page.shards[b]
        assert down["state"] == "down" and "messages" not in down
        assert down["error"].startswith(f"XX000: partition p1, p3 (dbname {b}): ")
        assert f"port {port} failed" in down["error"] and "Connection refused" in down["error"]
        assert page.total["messages"] == expected[a]["messages"]
        assert "1 of 2 shards" in body and f"{b}: shard_down" in body and "1 down" in body


def test_the_console_shows_a_shard_and_its_fleet_side_by_side(fleet, directory_login, users):
    name = _login_role(fleet.shards[0], "mailroom_operator")
    try:
        with _web(as_user(fleet.shards[0], name), users, "--fleet-dsn", directory_login) as console:
            cookie = _signed_in(console)
            status, _, body = request(console, "GET", "/", cookie=cookie)
            assert status == 200 and "<h1>Overview" in body
            page = _fleet_page(console, cookie)
            assert page.nav[0] == "Overview" and page.nav[-1] == "Fleet"
            assert sorted(page.shards) == sorted(fleet.names)
    finally:
        with connect(fleet.shards[0]) as c:
            c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_the_fleet_console_refuses_a_login_that_is_more_or_less_than_a_fleet_operator(fleet, users):
    code, _, err = run("web", "--fleet-dsn", as_user(fleet.directory, fleet.caller), "--users-file", str(users))
    assert code == exitcodes.REFUSED and "--fleet-dsn: the console's login must hold mailroom_fleet_operator and" \
        " nothing more, it is also mailroom_fleet_app" in err, err
    name = _login_role(fleet.shards[0], "mailroom_operator")
    try:
        code, _, err = run("web", "--fleet-dsn", as_user(fleet.shards[0], name), "--users-file", str(users))
    finally:
        with connect(fleet.shards[0]) as c:
            c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
    assert code == exitcodes.REFUSED and "must be a member of mailroom_fleet_operator" in err, err
    code, _, err = run("web", "--users-file", str(users))
    assert code == exitcodes.USAGE and "give --dsn (a mailroom database) or --fleet-dsn" in err


def test_a_hung_shard_is_a_504_page_after_the_fleet_timeout(fleet, directory_login, monkeypatch):
    """A shard that accepts TCP and never answers: nothing in PL/Proxy ends
    the call, the console's statement_timeout on the directory does."""
    monkeypatch.setattr(console_app, "FLEET_STATEMENT_TIMEOUT", "2s")
    app = console_app.create_app(fleet_dsn=directory_login, accounts=Accounts.parse(
        f"{USER}:{hash_password(PASSWORD)}", "test"), secret_key=os.urandom(32))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        console = f"http://127.0.0.1:{server.server_port}"
        cookie = _signed_in(console)
        with _silent_listener() as port:
            hung = f"dbname={fleet.names[1]} host=127.0.0.1 port={port} connect_timeout=2"
            with fleet.shard_down(fleet.names[1], connstr=hung):
                status, _, body = request(console, "GET", "/fleet", cookie=cookie)
        assert status == 504 and "the fleet did not answer within 2s" in body, body
        assert request(console, "GET", "/fleet", cookie=cookie)[0] == 200   # the same pool, answering again
    finally:
        server.shutdown()
        console_app.close_app(app)


@pytest.mark.skipif(not (shutil.which(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                    reason="needs Debian's chromium and chromium-driver (make deps installs them as root)")
def test_the_fleet_page_in_a_browser_marks_the_shard_down(browser, fleet, directory_login, users):  # noqa: F811
    from selenium.webdriver.common.by import By

    with _web(None, users, "--fleet-dsn", directory_login) as console:
        login(browser, console)
        assert browser.current_url == console + "/fleet"
        with fleet.shard_down(fleet.names[1]):
            browser.get(console + "/fleet")
            shoot(browser, "fleet-down")
            down = browser.find_element(By.CSS_SELECTOR, f"tr[data-shard='{fleet.names[1]}']")
            up = browser.find_element(By.CSS_SELECTOR, f"tr[data-shard='{fleet.names[0]}']")
            assert down.get_attribute("data-state") == "down" and "DOWN" in down.text
            assert "Connection refused" in down.text
            assert up.get_attribute("data-state") == "up"
            assert "1 of 2 shards" in browser.find_element(By.ID, "fleet-total").text
            assert "1 down" in browser.find_element(By.TAG_NAME, "h1").text
