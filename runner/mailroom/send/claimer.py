"""Claiming, for a runner over one database or several: one claim from each
database that may be claimed from per round, templates loaded for what was
claimed, the rows handed to the send pool under their leases (InFlight)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Callable

from mailroom import metrics, queries
from mailroom.logs import event
from mailroom.send.database import Database
from mailroom.send.inflight import InFlight, Job
from mailroom.send.unsubscribe import Unsubscribe


class Claimer:
    def __init__(self, databases: list[Database], settings, inflight: InFlight, submit: Callable[[list[Job]], None],
                 *, needs_message: bool, unsubscribe: Unsubscribe):
        self.databases = databases
        self.s = settings
        self.inflight = inflight
        self.submit = submit  # the send pool's submit_many
        self.needs_message = needs_message  # templates are loaded only when mail is built
        self.unsubscribe = unsubscribe
        self._rotation = 0  # which database a claim round starts with

    def round(self) -> tuple[int, bool, list[Database]]:
        """One claim from each database that may be claimed from, while
        there is room, starting one database further each round: a database
        whose mail keeps coming back in full batches cannot starve the next.
        Returns the rows claimed, whether a claim came back full, and the
        databases whose claim came back short (those may be waited on)."""
        now = time.monotonic()
        order = self.databases[self._rotation:] + self.databases[:self._rotation]
        self._rotation = (self._rotation + 1) % len(self.databases)
        claimed, full, short = 0, False, []
        for db in order:
            if not db.ready(now):
                continue
            if not self.inflight.has_room():
                full = True  # no room left this round: the rest come first next round
                break
            try:
                db.reclaim_if_due()
                got = self.claim(db)
                db.answered()
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                db.failed(e)
                continue
            claimed += got
            if got == self.s.batch:
                db.busy()
                full = True
            else:
                short.append(db)
        return claimed, full, short

    def until_a_database_is_due(self, cap: float = 1.0) -> float:
        """Seconds until a database that could not be claimed from may be
        tried again: the first failure's backoff to end, or shortly for one
        whose outcomes wait to be written (at most cap)."""
        now = time.monotonic()
        waits = [db.retry_at - now if db.retry_at > now else 0.2
                 for db in self.databases if not db.ready(now)]
        return max(0.01, min([cap, *waits]))

    def send_rate_wait(self, dbs: list[Database]) -> float | None:
        waits = []
        for db in dbs:
            try:
                wait = queries.send_rate_retry_after(db.pool, self.s.sender)
            except (queries.DatabaseUnavailable, queries.QueryError):
                continue  # the next claim finds out whether the database is back
            if wait and wait > 0:
                waits.append(wait)
        # Only when every short claim was cut by a send rate: one that found
        # the queue empty waits for a wake-up instead.
        return min(waits) if waits and len(waits) == len(dbs) else None

    def claim(self, db: Database) -> int:
        if self.unsubscribe.enabled and time.monotonic() - db.streams_read_at > 60:
            db.read_streams()
            self.merge_streams()
        t0 = time.perf_counter()
        rows = queries.claim_batch(db.pool, self.s.worker, self.s.batch, self.s.lease, self.s.sender)
        claim_s = time.perf_counter() - t0
        metrics.CLAIM_SECONDS.observe(claim_s)
        event(logging.DEBUG, "batch.claimed", count=len(rows), ms=round(claim_s * 1000, 1), database=db.name)
        db.last_claimed = len(rows)
        if not rows:
            return 0
        # Templates only when mail is built (plain null:// builds nothing).
        keys = sorted({r["template_key"] for r in rows if r.get("template_key")}) if self.needs_message else []
        unloaded: set[str] = set()
        if keys:
            try:
                db.renderer.load(queries.get_templates(db.pool, keys))
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                # Cached versions serve; mail whose template was never loaded
                # goes back to the queue rather than failing for a DB hiccup.
                unloaded = {k for k in keys if db.renderer.cached_version(k) is None}
                event(logging.WARNING, "templates.unavailable", error=str(e), handed_back=sorted(unloaded),
                      database=db.name)
        by_token: dict[object, list[dict]] = defaultdict(list)
        for r in rows:
            by_token[r["lease_token"]].append(r)
        for token, trs in by_token.items():
            b = self.inflight.add(db, token, trs, self.s.lease)
            ready = []
            for r in trs:
                if r.get("template_key") in unloaded:
                    self.inflight.hand_back(Job(r, b))
                else:
                    ready.append(Job(r, b))
            self.submit(ready)
        return len(rows)

    def merge_streams(self) -> None:
        """A stream carries unsubscribe headers when any database says so:
        streams are the fleet's configuration, kept alike on every shard."""
        merged: dict[str, bool] = {}
        for db in self.databases:
            for name, headers in db.streams.items():
                merged[name] = merged.get(name, False) or headers
        self.unsubscribe.streams = merged
