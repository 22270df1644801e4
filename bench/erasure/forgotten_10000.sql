SET mailroom_bench.forgotten = 10000;
