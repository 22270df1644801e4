"""Helpers an application imports beside its own code: cache-aside on
mailroom's cache table and the rate limiter. They need psycopg and the
schema, nothing else of mailroom."""
