// Runs the example bot: node bin/run-ts.mjs examples/bot/main.ts (see README.md for the variables).
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBot } from './bot.ts';

const env = process.env;
const purchase =
  env.BUY_PROFILE_INDEX && env.BUY_AMOUNT_CENTS
    ? {
        profile_index: Number(env.BUY_PROFILE_INDEX),
        amount_cents: Number(env.BUY_AMOUNT_CENTS),
        merchant_name: env.BUY_MERCHANT_NAME ?? 'Example Store',
        merchant_url: env.BUY_MERCHANT_URL ?? 'https://store.example.com',
        item_name: env.BUY_ITEM_NAME ?? 'USB cable',
        category: env.BUY_CATEGORY ?? 'retail',
      }
    : undefined;

const receiver = env.BOT_RECEIVER === 'direct' ? 'direct' : 'tunnel';
const bot = runBot({
  baseUrl: env.BOTPAY_URL ?? 'http://localhost:8080',
  botName: env.BOT_NAME ?? 'example-bot',
  ...(env.OWNER_EMAIL ? { ownerEmail: env.OWNER_EMAIL } : {}),
  ...(env.PAIRING_CODE ? { pairingCode: env.PAIRING_CODE } : {}),
  // Default: examples/bot/.state/ (git-ignored), not the directory the bot was started from.
  stateFile: env.BOT_STATE_FILE
    ? resolve(env.BOT_STATE_FILE)
    : fileURLToPath(new URL('./.state/bot.json', import.meta.url)),
  receiver,
  receiverPort: Number(env.BOT_RECEIVER_PORT ?? 18080),
  tunnel: env.BOT_TUNNEL === 'spawn' || env.BOT_TUNNEL === 'print' ? env.BOT_TUNNEL : 'sdk',
  ...(purchase ? { purchase } : {}),
  once: env.BOT_ONCE === 'true',
});

for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    console.log(`${sig}: stopping`);
    void bot.stop();
  });
}

try {
  await bot.done;
} catch (error) {
  if (!(error instanceof Error && error.message === 'stopped')) {
    console.error(error instanceof Error ? error.message : error);
    process.exitCode = 1;
  }
}
