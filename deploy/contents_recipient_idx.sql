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
-- touch it (bench/_sql_ab.py databases 100000 6 mailroom_sql.pgbench, with
-- and without this branch's indexes: median B/A 0.99, rounds 0.92-1.34).
-- Each mail adds one entry (its lower-cased address and id, about 40
-- bytes), in address order, not in the order mail is written: an
-- enqueue_campaign of 200,000 recipients took 2.51 s with it against 2.17 s
-- without (+15 %, median of 4 alternating rounds on the 2-core bench
-- machine; with COLLATE "C" 2.45 s, not worth a collation of its own), and
-- bench/campaign_1m.py --quick went from 2.3 x to 2.4-2.6 x its bare INSERT
-- (target 3 x). A single enqueue() in its own transaction, over 300,000
-- mails: 465 us against 460 (median of 6 rounds of 2,000). No partial index would do: transactional and campaign mail
-- are both searched for by recipient, and campaign mail is most of it. A
-- BRIN bloom index (text_bloom_ops) costs inserts nothing measurable but
-- reads every range's filter: 1.5-7 ms over 417,000 mails against 0.2-2 ms
-- over 17,500, still O(history). tests/pgtap/table_contents.sql counts it as
-- the fifth index. Without it find_messages runs as before (the same
-- query, by a primary-key range).

BEGIN;

CREATE INDEX contents_recipient_idx ON mailroom.contents (lower(to_address), id);

COMMIT;
