-- Split knowledge, round three (docs/security.md): decoys live in the owner's world instead of
-- imitating it.
--
-- 1. A held purchase is the same object on every profile. The owner decides it in the approvals
--    inbox and the e-mail, which show the purchase and never the profile; approving a decoy moves
--    no real money. The service no longer decides held decoys by itself (decide_at, decoy_outcome,
--    drawn by decoy_decision_sample from the profile's persona or the owner's past decisions):
--    a simulation of the owner showed the bot which profile was real whenever the owner did
--    something it had not predicted (denied a purchase they did not expect, say). Decoys still
--    pending when this runs go to the owner like every hold; they were not mailed when they were
--    made, and are not mailed now (the inbox shows them).
UPDATE checkout_confirmations SET decide_at = NULL, decoy_outcome = NULL WHERE status = 'pending';
UPDATE checkout_confirmations SET owner_mailed_at = now()
 WHERE status = 'pending' AND NOT is_real AND owner_mailed_at IS NULL;
DROP FUNCTION decoy_decision_sample(text, integer, real, real, real, integer);
-- Only the sampling read the owner's decided real holds in this order.
DROP INDEX checkout_confirmations_owner_decided_idx;
-- The inbox and the mail read every pending hold, not only real ones (the same index entries for
-- every profile, too: a real hold wrote entries a decoy did not).
DROP INDEX checkout_confirmations_owner_pending_idx;
CREATE INDEX checkout_confirmations_owner_pending_idx ON checkout_confirmations (owner_id, created_at)
  WHERE status = 'pending';
DROP INDEX checkout_confirmations_owner_mail_idx;
CREATE INDEX checkout_confirmations_owner_mail_idx ON checkout_confirmations (created_at)
  WHERE status = 'pending' AND owner_mailed_at IS NULL;
-- The personas' columns (card_profiles.persona_*) stay for instances of the previous version during
-- a rolling deploy (they write them when a card is activated); nothing reads them. They go with
-- the release after next.

-- 2. One card number, one set of profiles: a card added again (to another bot, or to the same one)
--    shares the profiles of the card it names, so no two files of one card differ in their decoys
--    (which would show the real profile) or in the digits they hide (which would give the whole
--    number). src/cards/service.ts startCard.
ALTER TABLE cards ADD COLUMN same_card_as text REFERENCES cards(id);

-- 3. A schedule buys for real, so it uses the card's real profile, and every other profile gets a
--    shadow (src/tasks/shadows.ts). Schedules made on a decoy profile left the real profile the one
--    profile never tasked; they move to the real profile, and the decoy profile they named gets a
--    shadow like its siblings (a copy of the schedule's first shadow). Whoever watched tasks before
--    this release could already tell; docs/security.md says so.
WITH moved AS (
  SELECT s.id, (s.instructions->>'profile_index')::int AS old_index, c.real_profile_index
    FROM task_schedules s JOIN cards c ON c.id = s.card_id
   WHERE s.shadow_of IS NULL AND s.status <> 'deleted'
     AND (s.instructions->>'profile_index')::int <> c.real_profile_index
), repointed AS (
  UPDATE task_schedules s SET instructions = jsonb_set(s.instructions, '{profile_index}', to_jsonb(m.real_profile_index))
    FROM moved m WHERE s.id = m.id
)
INSERT INTO task_schedules (id, bot_id, owner_id, card_id, cron, timezone, instructions, status, next_due_at,
    last_due_at, created_at, updated_at, shadow_of, shadow_offset_ms)
  SELECT 'schedule_' || translate(substr(md5(random()::text || sh.id), 1, 16), '0189', 'wxyz'),
         sh.bot_id, sh.owner_id, sh.card_id, sh.cron, sh.timezone,
         jsonb_set(sh.instructions, '{profile_index}', to_jsonb(m.old_index)), sh.status, sh.next_due_at,
         sh.last_due_at, sh.created_at, now(), sh.shadow_of, sh.shadow_offset_ms
    FROM moved m
    JOIN LATERAL (SELECT * FROM task_schedules x WHERE x.shadow_of = m.id ORDER BY x.id LIMIT 1) sh ON true;
