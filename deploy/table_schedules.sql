-- Deploy mailroom:table_schedules to pg
-- requires: table_messages
-- requires: table_templates
-- requires: table_settings
-- requires: function_next_occurrence

BEGIN;

CREATE TABLE mailroom.schedules (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  schedule_key  text NOT NULL,
  recipient_id  text,
  to_address    text NOT NULL,
  time_zone     text NOT NULL,
  rule          text NOT NULL,
  template_key  text NOT NULL REFERENCES mailroom.templates (key),
  vars          jsonb NOT NULL DEFAULT '{}',
  channel       text NOT NULL DEFAULT 'email',
  priority      smallint NOT NULL DEFAULT 0,
  sender        text NOT NULL DEFAULT 'default',
  window_start  time,
  window_end    time,
  active        boolean NOT NULL DEFAULT true,
  next_run_at   timestamptz,
  last_run_at   timestamptz,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT schedules_key_unique UNIQUE (schedule_key),
  CONSTRAINT schedules_key_format CHECK (schedule_key ~ '^[^[:cntrl:]]{1,200}$'),
  CONSTRAINT schedules_channel_format CHECK (channel ~ '^[a-z0-9_-]{1,32}$'),
  CONSTRAINT schedules_priority_range CHECK (priority BETWEEN -100 AND 100),
  CONSTRAINT schedules_window_complete CHECK ((window_start IS NULL) = (window_end IS NULL)),
  CONSTRAINT schedules_window_not_empty CHECK (window_start <> window_end),
  CONSTRAINT schedules_vars_object CHECK (jsonb_typeof(vars) = 'object'),
  CONSTRAINT schedules_inactive_not_due CHECK (active OR next_run_at IS NULL)
);
ALTER TABLE mailroom.schedules OWNER TO mailroom_owner;
-- materialize_schedules walks this in next_run_at order, a batch at a time.
CREATE INDEX schedules_due_idx ON mailroom.schedules (next_run_at, id) WHERE active;

COMMENT ON TABLE mailroom.schedules IS
  'Recurring mail, one row per recipient and purpose: a 5-field cron rule in the recipient''s IANA zone. materialize_schedules turns due rows into messages. Write through schedule_upsert / schedule_set_active.';
COMMENT ON COLUMN mailroom.schedules.schedule_key IS
  'The application''s stable name for the schedule (e.g. weekly-digest:user:42); schedule_upsert is keyed on it.';
COMMENT ON COLUMN mailroom.schedules.rule IS
  '5-field cron expression in local time of time_zone (see next_occurrence).';
COMMENT ON COLUMN mailroom.schedules.next_run_at IS
  'UTC instant of the next local occurrence not yet materialized; NULL when inactive.';
COMMENT ON COLUMN mailroom.schedules.last_run_at IS
  'UTC instant of the occurrence most recently turned into a message.';
COMMENT ON COLUMN mailroom.schedules.channel IS
  'Last part of the delivery key schedule:<id>:<local period>:<channel>.';

ALTER TABLE mailroom.messages
  ADD CONSTRAINT messages_schedule_fk FOREIGN KEY (schedule_id) REFERENCES mailroom.schedules (id);

INSERT INTO mailroom.settings (key, value, description) VALUES
  ('schedule_lookahead', '5 minutes',
   'materialize_schedules queues an occurrence this long before it is due, so it goes out on time.'),
  ('schedule_batch', '5000',
   'Most schedules one materialize_schedules call turns into mail (a long outage drains over several runs).'),
  ('schedule_max_lateness', '1 day',
   'An occurrence missed by more than this (e.g. pg_cron was down) is skipped, not sent late.');

COMMIT;
