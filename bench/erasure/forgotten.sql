-- bench/_sql_ab.py PRE file (and tests/test_erasure.py): forget
-- current_setting('mailroom_bench.forgotten') addresses (none of them a bench
-- recipient) as forget leaves them: the hash in forgotten_addresses, the bit
-- in forgotten_filter; then analyse. Set the number first with one of
-- bench/erasure/forgotten_N.sql in the same PRE list.
DO $$
DECLARE v_bits bytea; v_bit bigint;
BEGIN
  INSERT INTO mailroom.forgotten_addresses (key_hash)
  SELECT mailroom._forgotten_hash('gone' || g || '@d' || (g % 50) || '.example')
  FROM generate_series(1, current_setting('mailroom_bench.forgotten')::int) g
  ON CONFLICT DO NOTHING;
  SELECT f.bits INTO v_bits FROM mailroom.forgotten_filter f;
  FOR v_bit IN SELECT mailroom._forgotten_bit('gone' || g || '@d' || (g % 50) || '.example')
               FROM generate_series(1, current_setting('mailroom_bench.forgotten')::int) g LOOP
    v_bits := set_bit(v_bits, v_bit, 1);
  END LOOP;
  UPDATE mailroom.forgotten_filter SET bits = v_bits;
END
$$;
ANALYZE mailroom.forgotten_addresses;
