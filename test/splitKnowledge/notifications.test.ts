import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOT_STATE_CHANNEL } from '../../src/bots/stateCache.ts';
import { EVENTS_CHANNEL } from '../../src/events/outbox.ts';
import { checkout, patchCard, purchase, setupCard, type TestCard } from '../checkout/helpers.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';

// What a purchase announces to every instance (the status caches listen on botpay_bot_state, the
// delivery workers on botpay_events) must not depend on the profile. A real purchase once also
// named the owner ('owner:<id>', from the owner's master counter) and a decoy 'owner:<id>:decoy':
// the first drops the cached status of every bot of the owner, so a second bot of the same owner
// could tell a real purchase from a decoy by timing its own status calls. Keys are compared with
// the ids replaced by placeholders; other test files' notifications (same PostgreSQL database)
// are left out by keeping only keys that name this bot or owner.

describe('split knowledge: notifications of a purchase', () => {
  let svc: TestService;
  let owner: TestOwner;
  let botId: string;
  let auth: Record<string, string>;
  let card: TestCard;
  const heard: string[] = [];
  const unlisten: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    svc = await createTestService();
    owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 100_000 });
    botId = bot.bot_id;
    auth = bot.auth;
    card = await setupCard(svc, owner, botId, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 5_000,
    });
    for (const channel of [BOT_STATE_CHANNEL, EVENTS_CHANNEL]) {
      unlisten.push(
        await svc.ctx.db.listen(channel, (payload) => {
          for (const key of payload.split(',')) {
            if (!key.includes(botId) && !key.includes(owner.id)) continue;
            heard.push(`${channel} ${key.replaceAll(botId, '<bot>').replaceAll(owner.id, '<owner>')}`);
          }
        }),
      );
    }
  });
  afterAll(async () => {
    for (const u of unlisten) await u();
    await svc?.close();
  });

  /** The keys announced by one checkout on this profile (sorted, ids replaced). */
  async function announced(profileIndex: number, amountCents: number, status: number): Promise<string[]> {
    heard.length = 0;
    const res = await checkout(svc, { auth }, purchase(profileIndex, amountCents));
    expect(res.statusCode, res.body).toBe(status);
    // The service's own notifications reach its listeners before the call returns; a moment for
    // anything that would come later.
    await new Promise((r) => setTimeout(r, 50));
    return [...heard].sort();
  }

  it('an approved purchase announces the same keys on the real profile and on a decoy', async () => {
    const real = await announced(card.real_profile_index, 100, 200);
    const decoy = await announced(card.decoyIndex, 100, 200);
    expect(real).toContain(`${BOT_STATE_CHANNEL} bot:<bot>`);
    expect(decoy).toEqual(real);
  });

  it('a held purchase announces the same keys on the real profile and on a decoy', async () => {
    await patchCard(svc, owner, botId, card.card_id, { approval_mode: 'ask_for_everything' });
    const real = await announced(card.real_profile_index, 100, 202);
    const decoy = await announced(card.decoyIndex, 100, 202);
    expect(real).toContain(`${BOT_STATE_CHANNEL} bot:<bot>`);
    expect(decoy).toEqual(real);
  });
});
