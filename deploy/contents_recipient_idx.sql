-- Deploy mailroom:contents_recipient_idx to pg
-- requires: table_contents
-- requires: address_wire_form

-- find_messages by recipient scanned the newest 100,000 contents rows (a
-- primary-key range) on every search: 5 ms over a day's mail, 30 ms once
-- the history is longer than that window (issue 32, item 7). By this index
-- it reads the recipient's newest mail only.
--
-- What it costs: contents rows are written once (enqueue, enqueue_campaign,
-- schedules) and never updated, so claims, finishes and the drain do not
-- touch it; each mail adds one entry (its lower-cased address and id, about
-- 40 bytes). An INSERT ... SELECT of 200,000 campaign-like rows into
-- contents took 2.0-2.3 s without it and 2.3-2.5 s with it (about +15-25 %
-- of that statement, on the 2-core bench machine; enqueue_campaign does more
-- than that statement). No partial index would do: transactional and
-- campaign mail are both searched for by recipient. tests/pgtap/table_contents.sql
-- counts it as the fifth index.

BEGIN;

CREATE INDEX contents_recipient_idx ON mailroom.contents (lower(to_address), id);

COMMIT;
