-- Spending counters announce a change on botpay_bot_state only for the bot's own counters
-- ('bot:<id>', the month figure a bot's status shows; src/bots/status.ts). Until now every counter
-- row a checkout wrote ran notify_bot_state (seven per purchase: card, profile, owner and bot
-- windows), which announced the owner's master counter as 'owner:<id>' on a real purchase and the
-- decoy memo counter as 'owner:<id>:decoy' on a decoy one. No cached answer reads the owner's
-- counters (the owner API reads them fresh), but 'owner:<id>' dropped the cached status of every
-- bot of the owner: a second bot of the same owner could tell a real purchase from a decoy by
-- timing its own status calls (test/splitKnowledge/notifications.test.ts). The WHEN clause is
-- evaluated before a trigger call is queued, so the five other counter writes of a checkout no
-- longer call the function at all.
DROP TRIGGER spend_counters_state ON spend_counters;
CREATE TRIGGER spend_counters_state AFTER INSERT OR UPDATE ON spend_counters
  FOR EACH ROW WHEN (NEW.scope LIKE 'bot:%') EXECUTE FUNCTION notify_bot_state();
