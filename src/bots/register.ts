import { isIP } from 'node:net';
import { isDevelopmentBaseUrl } from '../config.ts';
import { emitEvent } from '../events/outbox.ts';
import { audit } from '../owners/audit.ts';
import type { AppContext } from '../platform/context.ts';
import { randomHex, sha256Hex } from '../platform/crypto.ts';
import { namedInsert } from '../platform/db/named.ts';
import { maybeOne, pgErrorCode, type Queryable } from '../platform/db/port.ts';
import { ApiError, validationError } from '../platform/errors.ts';
import { idSuffix, newId } from '../platform/ids.ts';
import { consumeRateLimit, releaseRateLimit, tooMany } from '../platform/rateLimit.ts';
import { displayText, optionalDisplayText } from '../platform/text.ts';
import { forbiddenReason } from '../webhooks/ssrf.ts';
import {
  buildTunnelSetup,
  isValidWebhookPath,
  type TunnelSetup,
  tunnelHostname,
  tunnelWebhookUrl,
  WEBHOOK_PATH_RULE,
} from './tunnelSetup.ts';

export const PRIMARY_BOT_TYPE = 'primary';
const EMAIL_PATTERN = /^[^\s@<>()[\]\\,;:"]+@[^\s@<>()[\]\\,;:"]+\.[^\s@<>()[\]\\,;:"]+$/;
// Failed pairing-code attempts per IP and hour: 6-digit codes must not be guessable by retrying.
const PAIRING_FAILURES_PER_HOUR = 20;

export interface RegistrationRequest {
  bot_name: string;
  owner_email: string;
  description?: string;
  callback_url?: string;
  pairing_code?: string;
  bot_type?: string;
  local_port?: number;
  webhook_path?: string;
}

export interface RegistrationResponse {
  bot_id: string;
  api_key: string;
  claim_token: string | null;
  status: 'pending_owner_verification' | 'active';
  owner_verification_url?: string;
  paired?: true;
  owner_uid?: string;
  webhook_secret: string;
  webhook_note: string;
  webhook_url?: string;
  tunnel_token?: string;
  tunnel_setup?: TunnelSetup;
  primary_hooks_token?: string;
  primary_hooks_token_note?: string;
  important: string;
}

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** Accepts `483921`, `483-921` and `483 921`; returns the six digits or undefined. */
export function normalizePairingCode(code: string): string | undefined {
  const match = /^(\d{3})[-\s]?(\d{3})$/.exec(code.trim());
  return match ? `${match[1]}${match[2]}` : undefined;
}

interface Validated {
  name: string;
  ownerEmail: string;
  description: string | null;
  callbackUrl: string | null;
  pairingCode: string | null;
  botType: string;
  localPort: number;
  webhookPath: string;
}

function validate(ctx: AppContext, body: RegistrationRequest): Validated {
  // Names and descriptions are shown to owners (pages, e-mail subjects and bodies): one plain,
  // visible line each (platform/text.ts), so a bot cannot add lines or headers to a mail the service
  // sends to an address of its choosing, nor reorder or hide what is shown.
  const name = displayText(body.bot_name, 'bot_name', 100);
  const ownerEmail = body.owner_email.trim();
  if (ownerEmail.length > 254 || !EMAIL_PATTERN.test(ownerEmail)) {
    throw validationError('owner_email must be a valid e-mail address', { field: 'owner_email' });
  }
  let callbackUrl: string | null = null;
  if (body.callback_url !== undefined) {
    callbackUrl = body.callback_url.trim();
    let parsed: URL;
    try {
      parsed = new URL(callbackUrl);
    } catch {
      throw validationError('callback_url must be an absolute http(s) URL', { field: 'callback_url' });
    }
    if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') {
      throw validationError('callback_url must be an absolute http(s) URL', { field: 'callback_url' });
    }
    if (parsed.username || parsed.password) {
      throw validationError('callback_url must not contain credentials', { field: 'callback_url' });
    }
    // An address the deliveries would refuse (loopback, private, link-local…: webhooks/ssrf.ts) is
    // refused now rather than at every delivery. Literal addresses and localhost names only: other
    // names are judged at delivery time on what DNS says then.
    if (!ctx.config.allowPrivateWebhookTargets) {
      const host = parsed.hostname.replace(/^\[|\]$/g, '').toLowerCase();
      const local = host === 'localhost' || host.endsWith('.localhost') ? 'loopback' : null;
      const reason = local ?? (isIP(host) ? forbiddenReason(host) : null);
      if (reason) {
        throw validationError(
          `callback_url points at ${host} (${reason}), where the service does not deliver webhooks: omit callback_url to get a managed tunnel, or run the service with ALLOW_PRIVATE_WEBHOOK_TARGETS=true (development only)`,
          { field: 'callback_url' },
        );
      }
    }
    const development = ctx.config.allowPrivateWebhookTargets || isDevelopmentBaseUrl(ctx.config);
    if (parsed.protocol === 'http:' && !development) {
      throw validationError('callback_url must use https', { field: 'callback_url' });
    }
  }
  let pairingCode: string | null = null;
  if (body.pairing_code !== undefined) {
    const normalized = normalizePairingCode(body.pairing_code);
    if (!normalized) throw validationError('pairing_code must be 6 digits', { field: 'pairing_code' });
    pairingCode = normalized;
  }
  const botType = (body.bot_type ?? PRIMARY_BOT_TYPE).trim();
  if (botType.length === 0)
    throw validationError('bot_type must be 1 to 50 characters', { field: 'bot_type' });
  const isPrimary = botType === PRIMARY_BOT_TYPE;
  const webhookPath = body.webhook_path ?? (isPrimary ? '/hooks/service' : '/webhook');
  // The path goes into a URL and onto a command line: path characters only, nothing a shell reads.
  if (!isValidWebhookPath(webhookPath)) {
    throw validationError(WEBHOOK_PATH_RULE, { field: 'webhook_path' });
  }
  return {
    name,
    ownerEmail,
    description: optionalDisplayText(body.description, 'description', 500),
    callbackUrl,
    pairingCode,
    botType,
    localPort: body.local_port ?? (isPrimary ? 18789 : 8080),
    webhookPath,
  };
}

export async function registerBot(
  ctx: AppContext,
  body: RegistrationRequest,
  clientIp: string,
): Promise<RegistrationResponse> {
  const input = validate(ctx, body);
  const now = ctx.clock.now();
  // Counted before the code is checked, atomically (its own committed transaction behind the
  // limiter's lock): parallel guesses cannot all pass a check made before any of them is counted.
  // A code that turns out valid gives its slot back.
  if (input.pairingCode) await reservePairingAttempt(ctx, clientIp, now);
  const botId = newId('bot');
  const apiKey = `svc_live_${randomHex(24)}`;
  const webhookSecret = `whsec_${randomHex(24)}`;
  const claimToken = input.pairingCode ? null : `svc_claim_${randomHex(24)}`;
  const tunnel = input.callbackUrl === null;
  const isPrimary = input.botType === PRIMARY_BOT_TYPE;
  const tunnelToken = tunnel ? `svc_tun_${randomHex(24)}` : null;
  const hooksToken = tunnel && isPrimary ? `svc_hooks_${randomHex(24)}` : null;
  const hostname = tunnel ? tunnelHostname(idSuffix(botId), ctx.config.tunnelDomain) : null;

  let ownerId: string | null = null;
  try {
    ownerId = await ctx.db.transaction(async (tx) => {
      const limited = await consumeRateLimit(tx, {
        key: `register:${clientIp}`,
        limit: isLoopbackAddress(clientIp)
          ? ctx.config.registrationRateLimitLoopbackPerHour
          : ctx.config.registrationRateLimitPerHour,
        windowSeconds: 3600,
        now,
      });
      if (!limited.ok) throw tooMany(limited.retryAfterSeconds, 'registrations from this address');

      const duplicate = await maybeOne(
        tx,
        'SELECT 1 AS found FROM bots WHERE owner_email_normalized = $1 AND name = $2',
        [normalizeEmail(input.ownerEmail), input.name],
      );
      if (duplicate) throw duplicateRegistration();

      let pairedOwner: string | null = null;
      if (input.pairingCode) {
        const code = await maybeOne<{ id: string; owner_id: string }>(
          tx,
          `SELECT id, owner_id FROM pairing_codes
            WHERE code_hash = $1 AND used_at IS NULL AND expires_at > $2 FOR UPDATE`,
          [ctx.secrets.keyedHash(input.pairingCode), new Date(now)],
        );
        if (!code)
          throw new ApiError('invalid_pairing_code', 'The pairing code is invalid, expired or already used.');
        await tx.query('UPDATE pairing_codes SET used_at = $2, used_by_bot_id = $3 WHERE id = $1', [
          code.id,
          new Date(now),
          botId,
        ]);
        pairedOwner = code.owner_id;
      }

      const row: NewBot = {
        id: botId,
        name: input.name,
        ownerEmail: input.ownerEmail,
        description: input.description,
        botType: input.botType,
        ownerId: pairedOwner,
        claimTokenHash: claimToken ? sha256Hex(claimToken) : null,
        claimedAt: pairedOwner ? now : null,
        apiKeyHash: sha256Hex(apiKey),
        apiKeyPrefix: apiKey.slice(0, 13),
        webhookSecretEnc: ctx.secrets.encrypt(webhookSecret),
        callbackUrl: input.callbackUrl,
        tunnelTokenHash: tunnelToken ? sha256Hex(tunnelToken) : null,
        tunnelHostname: hostname,
        localPort: tunnel ? input.localPort : null,
        webhookPath: tunnel ? input.webhookPath : null,
        hooksTokenEnc: hooksToken ? ctx.secrets.encrypt(hooksToken) : null,
        webhookStatus: tunnel ? 'pending' : 'active',
        registeredIp: clientIp,
        createdAt: now,
      };
      await tx.query(insertBot.sql, insertBot.params(row));
      await tx.query('INSERT INTO wallets (bot_id, status, updated_at) VALUES ($1, $2, $3)', [
        botId,
        pairedOwner ? 'active' : 'pending',
        new Date(now),
      ]);
      if (pairedOwner) {
        await activateWallet(tx, botId, pairedOwner, now, 'paired');
        // How the bot became the owner's, in their activity log (a claim writes bot.claimed).
        await audit(tx, { ownerId: pairedOwner, botId, action: 'bot.paired', at: now });
      }
      return pairedOwner;
    });
  } catch (error) {
    if (
      pgErrorCode(error) === '23505' &&
      String((error as Error).message).includes('owner_email_normalized')
    ) {
      throw duplicateRegistration();
    }
    // Any other failure is not a wrong guess: the slot comes back.
    if (input.pairingCode && !(error instanceof ApiError && error.code === 'invalid_pairing_code')) {
      await releasePairingAttempt(ctx, clientIp, now);
    }
    throw error;
  }
  if (input.pairingCode) await releasePairingAttempt(ctx, clientIp, now);

  const claimUrl = claimToken ? `${ctx.config.baseUrl}/claim?token=${claimToken}` : undefined;
  if (claimToken && claimUrl) {
    ctx.mailer
      .send({
        to: input.ownerEmail,
        subject: `Claim your bot "${input.name}"`,
        text:
          `A bot named "${input.name}" registered with the Bot Payment Service and named you as its owner.\n\n` +
          `If you expected this, claim it here (sign in with this e-mail address first):\n${claimUrl}\n\n` +
          'If you did not expect it, ignore this message: nothing happens until the bot is claimed.',
        redactInLog: [claimToken],
      })
      .catch(() => {});
  }

  const response: RegistrationResponse = {
    bot_id: botId,
    api_key: apiKey,
    claim_token: claimToken,
    status: ownerId ? 'active' : 'pending_owner_verification',
    ...(claimUrl ? { owner_verification_url: claimUrl } : {}),
    ...(ownerId ? { paired: true as const, owner_uid: ownerId } : {}),
    webhook_secret: webhookSecret,
    webhook_note:
      'Save webhook_secret now: it cannot be retrieved later. Use it to verify the X-Service-Signature header of every webhook.',
    important: ownerId
      ? 'Save your api_key now: it is shown once and cannot be retrieved later.'
      : 'Save your api_key now: it is shown once and cannot be retrieved later. Give the claim_token (or owner_verification_url) to your owner so they can claim you.',
  };
  if (tunnel && tunnelToken && hostname) {
    const webhookUrl = tunnelWebhookUrl(ctx.config.baseUrl, hostname, input.webhookPath);
    response.webhook_url = webhookUrl;
    response.tunnel_token = tunnelToken;
    response.tunnel_setup = buildTunnelSetup({
      baseUrl: ctx.config.baseUrl,
      webhookUrl,
      tunnelToken,
      localPort: input.localPort,
      webhookPath: input.webhookPath,
      primary: isPrimary,
    });
    if (hooksToken) {
      response.primary_hooks_token = hooksToken;
      response.primary_hooks_token_note =
        'Save primary_hooks_token now: it cannot be retrieved later. Set it in the environment variable SERVICE_HOOKS_TOKEN of your gateway.';
    }
  }
  return response;
}

/** Claiming or pairing: the wallet becomes usable and the card_wallet rail active. */
export async function activateWallet(
  tx: Queryable,
  botId: string,
  ownerId: string,
  now: number,
  via: 'claimed' | 'paired',
): Promise<void> {
  await tx.query(`UPDATE wallets SET status = 'active', updated_at = $2 WHERE bot_id = $1`, [
    botId,
    new Date(now),
  ]);
  await tx.query(
    `INSERT INTO rails (bot_id, rail_key, status, updated_at) VALUES ($1, 'card_wallet', 'active', $2)
     ON CONFLICT (bot_id, rail_key) DO UPDATE SET status = 'active', updated_at = EXCLUDED.updated_at`,
    [botId, new Date(now)],
  );
  await emitEvent(tx, {
    botId,
    type: 'wallet.activated',
    data: { owner_uid: ownerId, via, wallet_status: 'active', rail: 'card_wallet' },
    at: now,
  });
}

function duplicateRegistration(): ApiError {
  return new ApiError(
    'duplicate_registration',
    'A bot with this name is already registered for this owner e-mail.',
  );
}

/** A new bots row (the widest statement of registration, written once against named fields). */
interface NewBot {
  id: string;
  name: string;
  ownerEmail: string;
  description: string | null;
  botType: string | null;
  ownerId: string | null;
  claimTokenHash: string | null;
  claimedAt: number | null;
  apiKeyHash: string;
  apiKeyPrefix: string;
  webhookSecretEnc: string;
  callbackUrl: string | null;
  tunnelTokenHash: string | null;
  tunnelHostname: string | null;
  localPort: number | null;
  webhookPath: string | null;
  hooksTokenEnc: string | null;
  webhookStatus: 'pending' | 'active';
  registeredIp: string;
  createdAt: number;
}

const insertBot = namedInsert<NewBot>('bots', {
  id: (b) => b.id,
  name: (b) => b.name,
  owner_email: (b) => b.ownerEmail,
  owner_email_normalized: (b) => normalizeEmail(b.ownerEmail),
  description: (b) => b.description,
  bot_type: (b) => b.botType,
  owner_id: (b) => b.ownerId,
  claim_token_hash: (b) => b.claimTokenHash,
  claimed_at: (b) => (b.claimedAt === null ? null : new Date(b.claimedAt)),
  api_key_hash: (b) => b.apiKeyHash,
  api_key_prefix: (b) => b.apiKeyPrefix,
  webhook_secret_enc: (b) => b.webhookSecretEnc,
  callback_url: (b) => b.callbackUrl,
  tunnel_token_hash: (b) => b.tunnelTokenHash,
  tunnel_hostname: (b) => b.tunnelHostname,
  local_port: (b) => b.localPort,
  webhook_path: (b) => b.webhookPath,
  hooks_token_enc: (b) => b.hooksTokenEnc,
  webhook_status: (b) => b.webhookStatus,
  registered_ip: (b) => b.registeredIp,
  created_at: (b) => new Date(b.createdAt),
});

const pairingKey = (clientIp: string) => `pairing-failure:${clientIp}`;

/** Takes one of the address's wrong-guess slots for this attempt, or refuses with 429. */
async function reservePairingAttempt(ctx: AppContext, clientIp: string, now: number): Promise<void> {
  const result = await ctx.db.transaction((tx) =>
    consumeRateLimit(tx, {
      key: pairingKey(clientIp),
      limit: PAIRING_FAILURES_PER_HOUR,
      windowSeconds: 3600,
      now,
    }),
  );
  if (!result.ok) throw tooMany(result.retryAfterSeconds, 'wrong pairing codes');
}

/** Gives back the slot of an attempt that was not a wrong guess. */
async function releasePairingAttempt(ctx: AppContext, clientIp: string, now: number): Promise<void> {
  await releaseRateLimit(ctx.db, pairingKey(clientIp), now).catch((err) =>
    ctx.logger.warn({ err }, 'could not release a pairing attempt'),
  );
}

/** 127.0.0.0/8, ::1 and their IPv4-mapped form: a client on this machine. */
export function isLoopbackAddress(ip: string): boolean {
  const bare = ip.startsWith('::ffff:') ? ip.slice(7) : ip;
  return bare === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare);
}
