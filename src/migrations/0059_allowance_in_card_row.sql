-- A profile's allowance counts in the profile's own card row of spend_windows (issue 30).
--
-- A card purchase added to four counter rows: the profile's card row ('card:<id>' for the real
-- profile, 'card:<id>:p<index>' for a decoy: the card's daily and monthly limits), its allowance row
-- ('profile:<card>:<index>'), the owner's and the bot's. The first two count exactly the same
-- purchases — this profile's on this card: no decoy reaches 'card:<id>', and a card's real profile
-- is fixed before its first purchase —, so spend_run now checks both in one upsert of the card row
-- (spend_run.sql, steps 3–4): its day and month windows carry the card's limits, tightened by the
-- allowance when the allowance's window is the day or the month, and a weekly allowance (the
-- default) takes the row's week window, which the card's own limits never used. One conditional
-- upsert fewer per purchase (about 4 % of PostgreSQL's CPU per checkout), one statement fewer per
-- released hold (src/checkout/guardrails.ts counterSpecs).
--
-- Here: each allowance row's week figure moves into its card row, and the allowance rows go. A day
-- or month allowance reads the card row's day or month figure from now on, which counts the same
-- purchases (the allowance row had counted them since the allowance's window last changed: a
-- window switched within the period now counts the whole period's purchases, never fewer).
-- The table is locked first, so that no purchase of a previous version's instance changes a row
-- between the copy and the delete (rolling deploys: docs/deploy.md). One that waits for the lock
-- and runs on after the commit with the previous body still adds to an allowance row, which nothing
-- reads any more: at most one purchase per connection in flight at that moment is then left out of
-- a weekly allowance's figure until the week ends. A previous version's instance releasing a held
-- weekly purchase subtracts from the allowance row (gone) and not from the card row's week: the
-- figure stays higher than spent until the week ends (refuses earlier, never passes a limit).
LOCK TABLE spend_windows IN EXCLUSIVE MODE;

INSERT INTO spend_windows AS w (scope, week_start, week_micros)
SELECT CASE WHEN c.real_profile_index = a.profile_index THEN 'card:' || c.id ELSE 'card:' || c.id || ':p' || a.profile_index END,
       a.week_start, a.week_micros
  FROM (SELECT split_part(s.scope, ':', 2) AS card_id, split_part(s.scope, ':', 3)::integer AS profile_index,
               s.week_start, s.week_micros
          FROM spend_windows s
         WHERE s.scope LIKE 'profile:%' AND s.week_start IS NOT NULL) a
  JOIN cards c ON c.id = a.card_id
ON CONFLICT (scope) DO UPDATE SET week_start = EXCLUDED.week_start, week_micros = EXCLUDED.week_micros;

DELETE FROM spend_windows WHERE scope LIKE 'profile:%';
