-- Verify mailroom:suppression_search_indexes on pg

BEGIN;

SELECT 'mailroom.suppressions_created_idx'::regclass,
       'mailroom.suppressions_reason_idx'::regclass, 'mailroom.suppressions_source_idx'::regclass,
       'mailroom.suppressions_address_trgm_idx'::regclass;

ROLLBACK;
