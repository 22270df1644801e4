-- Deploy mailroom:table_senders to pg
-- requires: roles

BEGIN;

CREATE TABLE mailroom.senders (
  name           text NOT NULL,
  max_per_second integer,
  max_per_minute integer,
  updated_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT senders_pkey PRIMARY KEY (name),
  CONSTRAINT senders_name_length CHECK (length(name) BETWEEN 1 AND 200),
  CONSTRAINT senders_max_per_second_range CHECK (max_per_second BETWEEN 1 AND 1000000),
  CONSTRAINT senders_max_per_minute_range CHECK (max_per_minute BETWEEN 1 AND 60000000)
);
ALTER TABLE mailroom.senders OWNER TO mailroom_owner;

COMMENT ON TABLE mailroom.senders IS
  'Send rates per sender (messages.sender, e.g. one per provider account): claim_batch hands out no more than these allow, summed over every runner. A sender without a row is unlimited.';
COMMENT ON COLUMN mailroom.senders.name IS 'The sender, as in messages.sender and enqueue(p_sender).';
COMMENT ON COLUMN mailroom.senders.max_per_second IS
  'At most this many claims in any span of one second (sliding window); NULL = no per-second limit.';
COMMENT ON COLUMN mailroom.senders.max_per_minute IS
  'At most this many claims in any span of one minute (sliding window); NULL = no per-minute limit.';

CREATE FUNCTION mailroom._check_send_rate(p_max_per_second integer, p_max_per_minute integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_max_per_second IS NOT NULL AND p_max_per_second NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'mailroom: max_per_second: must be between 1 and 1000000 or NULL, got %', p_max_per_second
      USING ERRCODE = '22023';
  END IF;
  IF p_max_per_minute IS NOT NULL AND p_max_per_minute NOT BETWEEN 1 AND 60000000 THEN
    RAISE EXCEPTION 'mailroom: max_per_minute: must be between 1 and 60000000 or NULL, got %', p_max_per_minute
      USING ERRCODE = '22023';
  END IF;
END
$$;
ALTER FUNCTION mailroom._check_send_rate(integer, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom._check_send_rate(integer, integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom._check_send_rate(integer, integer) IS
  'Internal: raise 22023 unless each limit is NULL or within its range (senders and domain limits alike).';

CREATE FUNCTION mailroom.set_sender_limits(
  p_sender         text,
  p_max_per_second integer DEFAULT NULL,
  p_max_per_minute integer DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = mailroom, pg_temp
AS $$
BEGIN
  IF p_sender IS NULL OR length(p_sender) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'mailroom: sender: must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
  PERFORM mailroom._check_send_rate(p_max_per_second, p_max_per_minute);

  IF p_max_per_second IS NULL AND p_max_per_minute IS NULL THEN
    DELETE FROM mailroom.senders WHERE name = p_sender;
  ELSE
    INSERT INTO mailroom.senders AS s (name, max_per_second, max_per_minute, updated_at)
    VALUES (p_sender, p_max_per_second, p_max_per_minute, now())
    ON CONFLICT (name) DO UPDATE
       SET max_per_second = EXCLUDED.max_per_second,
           max_per_minute = EXCLUDED.max_per_minute,
           updated_at = EXCLUDED.updated_at;
  END IF;
END
$$;
ALTER FUNCTION mailroom.set_sender_limits(text, integer, integer) OWNER TO mailroom_owner;
REVOKE ALL ON FUNCTION mailroom.set_sender_limits(text, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailroom.set_sender_limits(text, integer, integer) TO mailroom_operator;
COMMENT ON FUNCTION mailroom.set_sender_limits(text, integer, integer) IS
  'Set the send rate of one sender (operators): at most p_max_per_second per second and p_max_per_minute per minute over all runners. Both NULL = unlimited (the row is removed). Takes effect at the next claim.';

COMMIT;
