-- Every change that shows in a bot's status or wallet check is announced on botpay_bot_state
-- ('bot:<id>' or 'owner:<id>'); every instance drops its cached copy (src/bots/stateCache.ts).
-- Row triggers on bots, owners, wallets, rails, cards (0001), topup_requests (0013), the
-- partner-wallet columns of x402_wallets (0021) and spend_windows (0026: the bot's own row only,
-- 'bot:<id>', by the trigger's WHEN, so a real purchase and a decoy announce the same keys — 0024,
-- test/splitKnowledge/notifications.test.ts). Changes of events are announced per statement by
-- notify_bot_state_rows. Defined in migrations 0001 and 0026 (this body); this file is its one
-- definition since 0033.
CREATE OR REPLACE FUNCTION notify_bot_state() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
  key text;
BEGIN
  IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
  IF TG_TABLE_NAME = 'bots' THEN key := 'bot:' || r.id;
  ELSIF TG_TABLE_NAME = 'owners' THEN key := 'owner:' || r.id;
  ELSIF TG_TABLE_NAME = 'spend_windows' THEN key := r.scope;
  ELSE key := 'bot:' || r.bot_id;
  END IF;
  IF key LIKE 'bot:%' OR key LIKE 'owner:%' THEN
    PERFORM botpay_notify('botpay_bot_state', key);
  END IF;
  RETURN NULL;
END $$;
