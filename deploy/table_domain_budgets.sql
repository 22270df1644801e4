-- Deploy mailroom:table_domain_budgets to pg
-- requires: table_rate_limits
-- requires: table_domain_limits

-- One row per recipient domain holding both of its send-rate windows (per
-- second and per minute), so that a claim locks, judges and spends a
-- domain's budget with one row and one statement (issue 13: a claim of 50
-- under a default domain limit cost 3 x an unlimited one with two
-- mailroom.rate_limits rows per domain, each looked up, locked and updated
-- apart). Sender budgets stay in mailroom.rate_limits (a few rows, read
-- before the candidates).

BEGIN;

-- UNLOGGED like mailroom.rate_limits: budgets are cheap to write and crash
-- recovery empties them (every domain starts a fresh window).
CREATE UNLOGGED TABLE mailroom.domain_budgets (
  domain       text COLLATE "C" NOT NULL,
  second_slots  bigint[] NOT NULL DEFAULT '{}',
  second_counts bigint[] NOT NULL DEFAULT '{0}',
  minute_slots  bigint[] NOT NULL DEFAULT '{}',
  minute_counts bigint[] NOT NULL DEFAULT '{0}',
  per_second   integer,
  per_minute   integer,
  granted      integer NOT NULL DEFAULT 0,
  expires_at   timestamptz NOT NULL,
  CONSTRAINT domain_budgets_pkey PRIMARY KEY (domain),
  CONSTRAINT domain_budgets_second_shape CHECK (cardinality(second_counts) = cardinality(second_slots) + 1),
  CONSTRAINT domain_budgets_minute_shape CHECK (cardinality(minute_counts) = cardinality(minute_slots) + 1)
-- Every claim that mails a domain updates its row without changing the key:
-- free space on the page lets those be HOT updates.
) WITH (fillfactor = 50);

ALTER TABLE mailroom.domain_budgets OWNER TO mailroom_owner;

COMMENT ON TABLE mailroom.domain_budgets IS
  'Send-rate budgets per recipient domain, both sliding windows in one row, spent by claim_batch (mailroom._domain_budgets_spend). UNLOGGED: emptied by crash recovery. Private: operators read send_rate_usage.';
COMMENT ON COLUMN mailroom.domain_budgets.domain IS 'The recipient domain (contents.to_domain).';
COMMENT ON COLUMN mailroom.domain_budgets.second_slots IS
  'Per-second window: the 20 ms slots (counted from the Unix epoch, as mailroom._rate_slot) that hold grants, ascending; empty while the domain has no per-second limit.';
COMMENT ON COLUMN mailroom.domain_budgets.second_counts IS
  'Sends granted before each slot of second_slots and, last, in all of them (cumulative, one element more than second_slots): the sends in a span of slots are a difference of two elements, found by width_bucket, without summing an array.';
COMMENT ON COLUMN mailroom.domain_budgets.minute_slots IS
  'Per-minute window: the 1.2 s slots that hold grants, ascending; empty while the domain has no per-minute limit.';
COMMENT ON COLUMN mailroom.domain_budgets.minute_counts IS 'Sends granted before each slot of minute_slots and, last, in all of them (as second_counts).';
COMMENT ON COLUMN mailroom.domain_budgets.per_second IS 'The per-second limit the last spend was judged against (NULL: none).';
COMMENT ON COLUMN mailroom.domain_budgets.per_minute IS 'The per-minute limit the last spend was judged against (NULL: none).';
COMMENT ON COLUMN mailroom.domain_budgets.granted IS
  'Sends the last spend granted (negative: given back), handed back to the claim that made it.';
COMMENT ON COLUMN mailroom.domain_budgets.expires_at IS
  'From this instant both windows are empty; rate_limit_sweep deletes the row a minute later.';

-- v0.3 kept a domain's windows as two rate_limits rows; the ones still
-- alive carry on here (their slots' hits summed up), so an upgrade does not
-- hand every domain a fresh minute. (The old rows expire and are swept.)
INSERT INTO mailroom.domain_budgets (domain, second_slots, second_counts, minute_slots, minute_counts, expires_at)
SELECT w.domain,
       coalesce(max(w.slots) FILTER (WHERE w.win = 's'), '{}'), coalesce(max(w.counts) FILTER (WHERE w.win = 's'), '{0}'),
       coalesce(max(w.slots) FILTER (WHERE w.win = 'm'), '{}'), coalesce(max(w.counts) FILTER (WHERE w.win = 'm'), '{0}'),
       max(w.expires_at)
FROM (SELECT left(substr(r.key, 17), -2) AS domain, right(r.key, 1) AS win, r.slots, r.expires_at,
             ARRAY[0::bigint] || ARRAY(SELECT sum(h.h) OVER (ORDER BY h.i) FROM unnest(r.slot_hits) WITH ORDINALITY AS h(h, i)
                                       ORDER BY h.i) AS counts
      FROM mailroom.rate_limits r
      WHERE starts_with(r.key, 'mailroom/domain/') AND r.algorithm = 'sliding' AND r.expires_at > now()
        AND cardinality(r.slots) = cardinality(r.slot_hits)
        AND ((r.key LIKE '%/s' AND r.window_length = interval '1 second')
             OR (r.key LIKE '%/m' AND r.window_length = interval '1 minute'))) AS w
GROUP BY w.domain;

COMMIT;
