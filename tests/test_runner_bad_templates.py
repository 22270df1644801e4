"""Nothing in one mail takes the runner down (issue 14, item 2): templates
that cannot compile or render, in one batch with good mail, against a real
runner process, sink and cluster. Each bad one fails with its error
recorded; the good ones are sent; the runner exits 0. (v0.3.0 exited 1 with
a traceback on the first two, and the whole batch stayed `sending`.)"""

from __future__ import annotations

from mailroom.dev.sink import Sink
from tests.runnerkit import RunnerProcess, enqueue, statuses

BAD = {
    # Compiling: Python's parser gives up (IndentationError: too many levels).
    "nested-ifs": ("{% if true %}" * 120 + "x" + "{% endif %}" * 120, "IndentationError"),
    # Compiling: RecursionError in Jinja's parser.
    "nested-parens": ("{{ " + "(" * 400 + "1" + ")" * 400 + " }}", "RecursionError"),
    # Rendering: a macro calling itself for ever.
    "recursive-macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
    # Building: a lone surrogate cannot be encoded as UTF-8.
    "lone-surrogate": ('{{ "\\udcff" }}', "UnicodeEncodeError"),
    # A plain syntax error, and a runtime error.
    "syntax": ("{% if %}", "syntax error"),
    "zero-division": ("{{ 1 / 0 }}", "ZeroDivisionError"),
}


def test_bad_templates_fail_their_own_mail_only(db_url, conn):
    ids = {}
    for key, (body, _) in BAD.items():
        conn.execute("SELECT mailroom.upsert_template(%s, 'Subject', %s, NULL)", (key, body))
        ids[key] = enqueue(conn, f"{key}@example.com", template=key, vars={}, delivery_key=key)
    good = [enqueue(conn, f"good{i}@example.com", subject="fine", body_text="fine", delivery_key=f"good-{i}")
            for i in range(3)]
    with Sink() as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", "--batch", "20",
                                       "--concurrency", "2") as r:
        assert r.wait(60) == 0, r.log()
        log = r.log()
        assert sink.stats()["received"] == len(good)
    assert "Traceback" not in log
    assert statuses(conn) == {"sent": len(good), "failed": len(BAD)}
    details = {row["message_id"]: row["smtp_text"] for row in conn.execute(
        "SELECT message_id, smtp_text FROM mailroom.attempts WHERE outcome = 'failed'")}
    for key, (_, error) in BAD.items():
        assert error in (details.get(ids[key]) or ""), (key, details.get(ids[key]))
