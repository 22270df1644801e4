-- Revert mailroom:suppression_search_indexes from pg. The pg_trgm extension stays:
-- other objects of the database may use it, and it holds no data.

BEGIN;

DROP INDEX mailroom.suppressions_address_trgm_idx;
DROP INDEX mailroom.suppressions_source_idx;
DROP INDEX mailroom.suppressions_reason_idx;
DROP INDEX mailroom.suppressions_created_idx;

COMMIT;
