-- Purchase tasks handed to bots by POST /api/v1/bot/tasks/next: real ones from owner schedules and
-- decoys the service plans on decoy profiles. Both kinds live in one table with one shape, so
-- every code path that the bot can observe treats them alike.

-- An owner's recurring real purchase. instructions holds the checkout fields (card_id resolved at
-- creation). next_due_at is the next occurrence not yet produced; the scheduler produces the
-- latest occurrence <= now once (catch-up after downtime without a burst) and moves it on.
CREATE TABLE task_schedules (
  id text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id),
  owner_id text NOT NULL REFERENCES owners(id),
  card_id text NOT NULL REFERENCES cards(id),
  cron text NOT NULL,
  timezone text NOT NULL,
  instructions jsonb NOT NULL,
  status text NOT NULL CHECK (status IN ('active', 'paused', 'deleted')),
  next_due_at timestamptz,
  last_due_at timestamptz,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
CREATE INDEX task_schedules_bot_idx ON task_schedules (bot_id, created_at);
CREATE INDEX task_schedules_due_idx ON task_schedules (next_due_at) WHERE status = 'active';

-- status: planned (a decoy waiting for its time; never shown) → available (handed out by next,
-- leased to the bot until leased_until) → in_checkout (a checkout with this task is pending
-- approval) → fulfilled (approved) or failed (denied / expired); available → expired when nobody
-- took it up within its lifetime. is_decoy is never serialised to the bot.
CREATE TABLE tasks (
  id text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id),
  card_id text NOT NULL REFERENCES cards(id),
  is_decoy boolean NOT NULL,
  schedule_id text REFERENCES task_schedules(id),
  due_at timestamptz NOT NULL,
  available_at timestamptz,
  expires_at timestamptz,
  profile_index integer NOT NULL CHECK (profile_index BETWEEN 1 AND 6),
  merchant_name text NOT NULL,
  merchant_url text NOT NULL,
  item_name text NOT NULL,
  amount_cents bigint NOT NULL CHECK (amount_cents > 0),
  category text NOT NULL,
  status text NOT NULL
    CHECK (status IN ('planned', 'available', 'in_checkout', 'fulfilled', 'failed', 'expired')),
  leased_until timestamptz,
  handed_out_at timestamptz,
  confirmation_id text,
  created_at timestamptz NOT NULL,
  completed_at timestamptz,
  UNIQUE (schedule_id, due_at)
);
-- What next-task reads: a bot's open tasks, oldest first.
CREATE INDEX tasks_bot_open_idx ON tasks (bot_id, available_at, id) WHERE status = 'available';
-- What the engine reads: planned decoys by due time, and available tasks by expiry.
CREATE INDEX tasks_planned_idx ON tasks (due_at) WHERE status = 'planned';
CREATE INDEX tasks_expiry_idx ON tasks (expires_at) WHERE status = 'available';

-- Decoy pacing per card: whether the warm-up decoys are planned, and how many of the card's real
-- confirmations the engine has already answered with decoys (a count, so a confirmation that
-- commits late with an earlier timestamp is still counted once).
CREATE TABLE decoy_pacing (
  card_id text PRIMARY KEY REFERENCES cards(id),
  warmup_planned boolean NOT NULL DEFAULT false,
  real_seen_count bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL
);
CREATE INDEX checkout_confirmations_card_real_idx ON checkout_confirmations (card_id, created_at, id)
  WHERE is_real;
