import type { AppContext } from '../platform/context.ts';
import { randomHex, sha256Hex } from '../platform/crypto.ts';
import { audit } from './audit.ts';
import { lockOwnedBot } from './locks.ts';

// A bot's credentials, rotated by its owner.

/** Issues a new API key (shown once); the old one stops working at once here and within a second elsewhere. */
export async function rotateApiKey(ctx: AppContext, ownerId: string, botId: string) {
  const now = ctx.clock.now();
  const apiKey = `svc_live_${randomHex(24)}`;
  await ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    await tx.query('UPDATE bots SET api_key_hash = $2, api_key_prefix = $3 WHERE id = $1', [
      botId,
      sha256Hex(apiKey),
      apiKey.slice(0, 13),
    ]);
    await audit(tx, { ownerId, botId, action: 'api_key.rotated', at: now });
  });
  return { bot_id: botId, api_key: apiKey, note: 'Shown once. The previous key no longer works.' };
}

/** Issues a new webhook secret (shown once); deliveries created from now on are signed with it. */
export async function rotateWebhookSecret(ctx: AppContext, ownerId: string, botId: string) {
  const now = ctx.clock.now();
  const secret = `whsec_${randomHex(24)}`;
  const previousValidUntil = await ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    // The secret being replaced keeps signing (Standard Webhooks header) until the overlap ends,
    // so the bot can switch without missing a delivery. A second rotation inside the window
    // replaces the previous secret: only the last two secrets ever sign.
    const overlapUntil = new Date(now + ctx.config.webhookSecretOverlapSeconds * 1000);
    await tx.query(
      `UPDATE bots SET webhook_secret_prev_enc = webhook_secret_enc, webhook_secret_prev_until = $3,
              webhook_secret_enc = $2
        WHERE id = $1`,
      [botId, ctx.secrets.encrypt(secret), overlapUntil],
    );
    await audit(tx, { ownerId, botId, action: 'webhook_secret.rotated', at: now });
    return overlapUntil;
  });
  return {
    bot_id: botId,
    webhook_secret: secret,
    previous_secret_valid_until: previousValidUntil.toISOString(),
    note: 'Shown once. Give it to your bot to verify signatures; deliveries are signed with the previous secret too (webhook-signature) until previous_secret_valid_until.',
  };
}
