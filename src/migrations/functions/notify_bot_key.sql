-- The API-key cache of every instance (src/bots/auth.ts) drops a bot's key when its hash changes
-- or the bot is deleted: trigger bots_key (AFTER UPDATE OF api_key_hash OR DELETE ON bots,
-- migration 0021) announces the bot on botpay_bot_keys. Defined first in migration 0021; this file
-- is its one definition since 0033.
CREATE OR REPLACE FUNCTION notify_bot_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM botpay_notify('botpay_bot_keys', OLD.id);
  RETURN NULL;
END $$;
