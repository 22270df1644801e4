"""The operator console (`mailroom web`) in a real headless browser: Debian's
chromium driven by selenium through /usr/bin/chromedriver (nothing is
downloaded: Selenium Manager is made to fail the test if it is asked), the
Flask app on a real WSGI server on loopback, logged into a database as a
login that holds mailroom_operator only, and a real `mailroom run` against
an aiosmtpd sink for the pause button.

One browser session for the module; each page's screenshot goes to the
test's temporary folder (MAILROOM_CONSOLE_OVERVIEW_PNG=path also writes the
overview there, which is how docs/console-overview.png is made)."""

from __future__ import annotations

import http.client
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from werkzeug.serving import make_server

from mailroom.web.console import SECURITY_HEADERS, create_app
from mailroom.web.console.auth import Accounts, hash_password
from mailroom.dev.sink import Sink
from tests.conftest import connect
from tests.operatorkit import as_user
from tests.runnerkit import RunnerProcess, wait_for

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
USER, PASSWORD = "olga", "correct horse battery staple"
CORE_STATE = Path(__file__).resolve().parent / "pgtap" / "include" / "core_state.psql"

pytestmark = pytest.mark.skipif(
    not (shutil.which(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="needs Debian's chromium and chromium-driver (make deps installs them as root)")


@pytest.fixture(scope="module")
def admin(module_db_url) -> Iterator[psycopg.Connection]:
    with connect(module_db_url) as c:
        yield c


@pytest.fixture(scope="module")
def operator_dsn(module_db_url, admin) -> Iterator[str]:
    name = f"t_console_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE mailroom_operator')
    yield as_user(module_db_url, name)
    with connect(module_db_url) as c:
        c.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.fixture(scope="module")
def console(operator_dsn) -> Iterator[str]:
    """The console's base URL, served by werkzeug in a thread."""
    app = create_app(operator_dsn, accounts=Accounts.parse(f"{USER}:{hash_password(PASSWORD)}", "test"),
                     secret_key=os.urandom(32))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    app.extensions["mailroom"]["db"].close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.common import selenium_manager

    def refuse(*args, **kwargs):
        raise AssertionError("Selenium Manager was invoked: it would download a driver")

    original = selenium_manager.SeleniumManager.binary_paths
    selenium_manager.SeleniumManager.binary_paths = refuse
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    driver.shots = tmp_path_factory.mktemp("console-screenshots")
    try:
        yield driver
    finally:
        driver.quit()
        selenium_manager.SeleniumManager.binary_paths = original


def shoot(browser, name: str) -> None:
    browser.save_screenshot(str(browser.shots / f"{name}.png"))


def click_and_load(browser, element) -> None:
    """Click a submit button and wait until the next page has replaced this one."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    page = browser.find_element(By.TAG_NAME, "html")

    def replaced(_driver) -> bool:
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            # Asked about a node while its document is being torn down,
            # Chromium answers with this inspector error rather than a stale
            # element reference (seen once in CI): the page is being replaced.
            if "does not belong to the document" in str(e):
                return True
            raise
        return False

    element.click()
    WebDriverWait(browser, 30).until(replaced)


def login(browser, console, password=PASSWORD) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console + "/login")
    browser.find_element(By.ID, "username").send_keys(USER)
    browser.find_element(By.ID, "password").send_keys(password)
    click_and_load(browser, browser.find_element(By.ID, "sign-in"))


def request(console: str, method: str, path: str, body: dict | None = None, cookie: str | None = None):
    """One HTTP request without following redirects: (status, headers, body)."""
    parts = urllib.parse.urlsplit(console)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body is not None else {}
    if cookie:
        headers["Cookie"] = cookie
    conn.request(method, path, urllib.parse.urlencode(body or {}), headers)
    response = conn.getresponse()
    result = response.status, dict(response.getheaders()), response.read().decode()
    conn.close()
    return result


def session_cookie(browser) -> str:
    return "; ".join(f"{c['name']}={c['value']}" for c in browser.get_cookies())


def campaign(admin, name: str, n: int) -> int:
    admin.execute("SELECT mailroom.upsert_template('console-news', 'News', 'Hello {{ name }}')")
    return admin.execute(
        "SELECT mailroom.enqueue_campaign(%s, 'console-news', %s, p_send_at => now() - interval '1 second') AS id",
        (name, f"SELECT g::text AS recipient_id, '{name}-' || g || '@example.org' AS email,"
               f" jsonb_build_object('name', 'User ' || g) AS vars FROM generate_series(1, {n}) g"),
    ).fetchone()["id"]


# --- no anonymous access -------------------------------------------------------------

def test_a_page_without_credentials_is_refused(console, admin):
    for path in ("/", "/campaigns", "/review", "/messages?q=x", "/suppressions", "/schedules", "/rates"):
        status, headers, body = request(console, "GET", path)
        assert status == 302 and headers["Location"].startswith("/login"), path
        assert "<table" not in body
    cid = campaign(admin, "anon", 3)
    status, _, _ = request(console, "POST", f"/campaigns/{cid}/pause", {"csrf_token": "guess"})
    assert status in (400, 401)
    assert admin.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", (cid,)).fetchone()["status"] == "active"


def test_every_response_sends_the_security_headers(console):
    for path in ("/login", "/static/console.css"):
        _, headers, _ = request(console, "GET", path)
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (path, name)
    assert "script-src 'self'" in SECURITY_HEADERS["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]


def test_a_wrong_password_signs_nobody_in(browser, console):
    from selenium.webdriver.common.by import By

    login(browser, console, password="not it")
    assert browser.current_url.startswith(console + "/login")
    assert "wrong name or password" in browser.find_element(By.TAG_NAME, "main").text
    shoot(browser, "login-refused")


def test_log_in_and_the_session_cookie_is_strict(browser, console):
    from selenium.webdriver.common.by import By

    login(browser, console)
    assert browser.current_url == console + "/"
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Overview")
    cookie = browser.get_cookie("mailroom_console")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert PASSWORD not in browser.page_source


# --- the overview --------------------------------------------------------------------

def test_the_overview_numbers_equal_the_database(browser, console, admin):
    from selenium.webdriver.common.by import By

    admin.execute(CORE_STATE.read_text())
    admin.execute(
        """
        SELECT pg_temp.t_mail('ov-' || s || '-' || g, s, now() - interval '10 minutes',
                              p_on_ambiguous => 'review', p_run_at => now() - g * interval '30 seconds')
        FROM generate_series(1, 6) g, unnest(ARRAY['ov-a', 'ov-b']) s
        """)
    admin.execute("SELECT mailroom.enqueue('later@example.com', 'S', 'B', p_sender => 'ov-a',"
                  " p_send_at => now() + interval '1 hour')")
    admin.execute("SELECT pg_temp.t_claim('ov-ov-a-1', 'w1', now() - interval '1 minute', '1 hour')")
    admin.execute("SELECT pg_temp.t_claim(k, 'w1', now() - interval '5 minutes') FROM unnest(ARRAY['ov-ov-a-2', 'ov-ov-b-2']) k")
    admin.execute("SELECT pg_temp.t_end('ov-ov-a-2', 'failed', now() - interval '4 minutes', 'failed', p_smtp_code => 550)")
    admin.execute("SELECT pg_temp.t_end('ov-ov-b-2', 'expired', now() - interval '4 minutes')")  # -> review
    admin.execute("SELECT pg_temp.t_claim('ov-ov-b-3', 'w1', now() - interval '3 minutes')")
    admin.execute("SELECT pg_temp.t_end('ov-ov-b-3', 'sent', now() - interval '3 minutes', 'sent')")

    browser.get(console + "/")
    shoot(browser, "overview")
    if os.environ.get("MAILROOM_CONSOLE_OVERVIEW_PNG"):
        browser.save_screenshot(os.environ["MAILROOM_CONSOLE_OVERVIEW_PNG"])
    shown = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#senders tbody tr[data-sender]"):
        cells = {c.get_attribute("data-metric"): int(c.text) for c in row.find_elements(By.CSS_SELECTOR, "td[data-metric]")}
        shown[row.get_attribute("data-sender")] = cells
    # The same numbers, straight from the tables (the superuser may read them).
    expected = {}
    for r in admin.execute(
        """
        SELECT s.sender,
               count(q.id) FILTER (WHERE q.status = 'queued') AS queued,
               count(q.id) FILTER (WHERE q.status = 'queued' AND q.run_at <= now()) AS due,
               count(q.id) FILTER (WHERE q.status = 'queued' AND q.run_at <= now() - interval '1 minute') AS overdue,
               count(q.id) FILTER (WHERE q.status = 'sending') AS sending,
               count(q.id) FILTER (WHERE q.status = 'paused') AS paused,
               count(q.id) FILTER (WHERE q.status = 'review') AS review,
               (SELECT count(*) FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id
                WHERE c.sender = s.sender AND a.outcome = 'failed' AND a.claimed_at > now() - interval '1 day') AS failed_day
        FROM (SELECT DISTINCT sender FROM mailroom.queue) s
        LEFT JOIN mailroom.queue q ON q.sender = s.sender
        GROUP BY s.sender
        """).fetchall():
        sender = r.pop("sender")
        expected[sender] = {k: int(v) for k, v in r.items()}
    assert shown == expected
    assert shown["ov-a"] == {"queued": 5, "due": 4, "overdue": 4, "sending": 1, "paused": 0, "review": 0, "failed_day": 1}
    assert shown["ov-b"]["review"] == 1
    sent_hour = admin.execute("SELECT count(*) AS n FROM mailroom.attempts WHERE outcome = 'sent' AND NOT duplicate"
                              " AND claimed_at > now() - interval '1 hour'").fetchone()["n"]
    assert int(browser.find_element(By.ID, "hour-sent").text) == sent_hour == 1
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.sent")) == 2  # one bar in each chart
    warnings = browser.find_element(By.ID, "warnings").text
    assert "review_waiting" in warnings and "no_live_runner" in warnings


# --- decisions ---------------------------------------------------------------------

def test_pausing_a_campaign_with_its_button_stops_a_running_runner(browser, console, admin, module_db_url):
    from selenium.webdriver.common.by import By

    admin.execute("SELECT pg_temp.t_decide(delivery_key, 'cancelled', 'cancelled', 'test', now())"
                  " FROM mailroom.contents c JOIN mailroom.queue q USING (id) WHERE c.delivery_key LIKE 'ov-%'")
    admin.execute("DELETE FROM mailroom.queue WHERE sender = 'ov-a'")  # the mail due later: not this test's
    n = 60
    cid = campaign(admin, "pause-me", n)
    # One mail at a time, 0.1 s each at the sink: the campaign takes seconds,
    # so the button is pressed while the runner is sending it.
    with Sink(keep=True, delay=0.1) as sink, \
         RunnerProcess(module_db_url, sink.url(), "--concurrency", "1", "--batch", "1", "--poll-interval", "0.2") as runner:
        wait_for(lambda: sink.received >= 3, timeout=20, what="the runner sends part of the campaign")
        browser.get(console + "/campaigns")
        row = browser.find_element(By.CSS_SELECTOR, f"tr[data-campaign='{cid}']")
        click_and_load(browser, row.find_element(By.CSS_SELECTOR, "button.pause"))
        assert "pause" in browser.find_element(By.CSS_SELECTOR, ".flash.ok").text
        shoot(browser, "campaigns-paused")
        assert admin.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", (cid,)).fetchone()["status"] == "paused"
        # A claim that began before the pause committed may still be sending its one mail.
        wait_for(lambda: admin.execute("SELECT count(*) AS n FROM mailroom.queue WHERE status = 'sending'")
                 .fetchone()["n"] == 0, what="the mail in flight at the pause to finish")
        received = sink.received
        time.sleep(1.5)  # 15 mails' time: the runner keeps polling
        assert runner.proc.poll() is None, runner.log()
        assert sink.received == received, "the runner sent campaign mail after the pause"
        progress = admin.execute("SELECT sent, paused, queued FROM mailroom.campaign_progress WHERE campaign_id = %s",
                                 (cid,)).fetchone()
        assert progress["sent"] == received and progress["queued"] == 0
        assert progress["paused"] == n - received > 0
        browser.get(console + "/campaigns")
        assert browser.find_element(By.CSS_SELECTOR, f"tr[data-campaign='{cid}'] [data-field=status]").text == "paused"
        assert runner.stop() == 0


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(browser, console, admin):
    cid = campaign(admin, "csrf-target", 2)
    login(browser, console)  # a valid, signed-in session cookie
    cookie = session_cookie(browser)
    for form in ({}, {"csrf_token": "forged"}):
        status, _, body = request(console, "POST", f"/campaigns/{cid}/pause", form, cookie=cookie)
        assert status == 400 and "CSRF" in body
    admin.execute("SELECT mailroom.suppress('keep@example.com', 'manual')")
    status, _, _ = request(console, "POST", "/suppressions/lift", {"address": "keep@example.com"}, cookie=cookie)
    assert status == 400
    assert admin.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", (cid,)).fetchone()["status"] == "active"
    assert admin.execute("SELECT count(*) AS n FROM mailroom.suppressions WHERE address = 'keep@example.com'"
                         ).fetchone()["n"] == 1


def test_resolving_a_review_item(browser, console, admin):
    from selenium.webdriver.common.by import By

    mid = admin.execute("SELECT pg_temp.t_mail('rv-1', 'default', now() - interval '5 minutes', p_on_ambiguous => 'review')"
                        " AS id").fetchone()["id"]
    admin.execute("SELECT pg_temp.t_claim('rv-1', 'w1', now() - interval '4 minutes')")
    admin.execute("SELECT pg_temp.t_end('rv-1', 'ambiguous', now() - interval '3 minutes', 'ambiguous')")
    assert admin.execute("SELECT status FROM mailroom.queue WHERE id = %s", (mid,)).fetchone()["status"] == "review"
    browser.get(console + "/review")
    shoot(browser, "review")
    click_and_load(browser, browser.find_element(By.CSS_SELECTOR, f"tr[data-message='{mid}'] button.sent"))
    assert f"message {mid}: resolved as sent" in browser.find_element(By.CSS_SELECTOR, ".flash.ok").text
    assert not browser.find_elements(By.CSS_SELECTOR, f"tr[data-message='{mid}']")
    row = admin.execute("SELECT finished_as, outcome FROM mailroom.attempts WHERE message_id = %s"
                        " AND finished_as IS NOT NULL", (mid,)).fetchone()
    assert row == {"finished_as": "sent", "outcome": "resolved"}
    assert admin.execute("SELECT count(*) AS n FROM mailroom.queue WHERE id = %s", (mid,)).fetchone()["n"] == 0


def test_a_message_by_recipient_with_its_ledger(browser, console, admin):
    from selenium.webdriver.common.by import By

    mid = admin.execute("SELECT id FROM mailroom.contents WHERE delivery_key = 'rv-1'").fetchone()["id"]
    to = admin.execute("SELECT to_address FROM mailroom.contents WHERE id = %s", (mid,)).fetchone()["to_address"]
    browser.get(console + "/messages?" + urllib.parse.urlencode({"q": to.upper()}))
    assert browser.current_url == f"{console}/messages/{mid}"
    shoot(browser, "message")
    ledger = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#ledger li")]
    assert len(ledger) == 2 and ledger[0].split()[1] == "ambiguous" and "finished as sent" in ledger[1]


def test_lifting_and_adding_a_suppression(browser, console, admin):
    from selenium.webdriver.common.by import By

    admin.execute("SELECT mailroom.suppress('Lift.Me@Example.com', 'complaint', 'fbl')")
    browser.get(console + "/suppressions?q=lift.me")
    shoot(browser, "suppressions")
    click_and_load(browser, browser.find_element(By.CSS_SELECTOR, "tr[data-address='Lift.Me@Example.com'] button.lift"))
    assert "lifted" in browser.find_element(By.CSS_SELECTOR, ".flash.ok").text
    assert admin.execute("SELECT count(*) AS n FROM mailroom.suppressions WHERE address = 'Lift.Me@Example.com'"
                         ).fetchone()["n"] == 0
    form = browser.find_element(By.ID, "suppress-form")
    form.find_element(By.NAME, "address").send_keys("new.one@example.com")
    form.find_element(By.NAME, "note").send_keys("asked by phone")
    click_and_load(browser, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    row = admin.execute("SELECT reason, source FROM mailroom.suppressions WHERE address = 'new.one@example.com'").fetchone()
    assert row == {"reason": "manual", "source": f"console:{USER}: asked by phone"}
    assert "suppressed new.one@example.com" in browser.find_element(By.CSS_SELECTOR, ".flash.ok").text


def test_the_other_pages_render(browser, console, admin):
    from selenium.webdriver.common.by import By

    admin.execute("SELECT mailroom.set_sender_limits('default', 5, 100)")
    admin.execute("SELECT mailroom.schedule_upsert('console-weekly', 'sam@example.com', '0 8 * * 1', 'Europe/Paris',"
                  " 'console-news', '{\"name\": \"Sam\"}')")
    admin.execute("SELECT mailroom.webhook_endpoint_set('console-app', 'https://hooks.example.com/in?key=q7TokenValue',"
                  " 'hooks')")
    for path, name, needle in (("/schedules", "schedules", "console-weekly"), ("/rates", "rates", "default"),
                               ("/campaigns", "campaigns", "pause-me"), ("/webhooks", "webhooks", "console-app")):
        browser.get(console + path)
        shoot(browser, name)
        assert needle in browser.find_element(By.TAG_NAME, "main").text
    assert "Sam" not in browser.page_source  # schedules are listed without their variables
    browser.get(console + "/webhooks")
    assert "q7TokenValue" not in browser.page_source  # nor an endpoint's query string
    assert browser.find_element(By.CSS_SELECTOR, "tr[data-endpoint='console-app'] button.pause")
