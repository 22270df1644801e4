SET mailroom_bench.forgotten = 100;
