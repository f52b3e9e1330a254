-- The bot's status shows its partner wallet (address, network, the last balance read from the
-- chain and when). Until now only this process's commits dropped the cached status after such a
-- change (every local commit cleared the whole status cache); the cache now listens for precise
-- keys only, so these columns announce their changes like the other tables the status reads
-- (notify_bot_state, 0001). The money projections (available/held/authorized) are not shown and
-- stay silent.
CREATE TRIGGER x402_wallets_state
  AFTER INSERT OR DELETE OR UPDATE OF address, network, chain_balance_micro, balance_read_at ON x402_wallets
  FOR EACH ROW EXECUTE FUNCTION notify_bot_state();

-- The API-key cache of every instance (src/bots/auth.ts) drops a bot's key when its hash changes
-- (rotation) or the bot goes, on its own channel: the bot-state channel above fires on every
-- purchase, which would empty the key cache just as often.
CREATE FUNCTION notify_bot_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM botpay_notify('botpay_bot_keys', OLD.id);
  RETURN NULL;
END $$;
CREATE TRIGGER bots_key AFTER UPDATE OF api_key_hash OR DELETE ON bots
  FOR EACH ROW EXECUTE FUNCTION notify_bot_key();
