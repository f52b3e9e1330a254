import { type Static, type TObject, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { BotPayClient } from '../../packages/client/src/index.ts';
import { isBotPayError } from '../../packages/client/src/index.ts';
import { CheckoutBody, StatusQuery } from '../checkout/routes.ts';
import { TopupRequestBody } from '../topups/schemas.ts';
import { IdParam } from '../platform/schemas.ts';
import { AckBody } from '../webhooks/routes.ts';
import { FetchBody, PayBody } from '../x402/schemas.ts';

// The bot's tools for agents that speak MCP (docs/bots.md, "Agents over MCP"). Each tool's input
// schema is built from the TypeBox schema of the route it calls — TypeBox schemas are JSON Schema,
// so they go to tools/list unchanged and the arguments are checked against the very same schema
// here before anything is sent. Each tool calls the bot API through the SDK (packages/client), so
// retries, the checkout's Idempotency-Key and the approval polling behave exactly as for SDK users.

/** What a tool answers: the service's JSON, or the error envelope with the spec's code. */
export interface ToolOutcome {
  isError: boolean;
  body: Record<string, unknown>;
}

export interface ToolContext {
  client: BotPayClient;
  /** Reports progress of a long call (wait_for_decision) to the agent, when it asked for it. */
  progress?: (progress: number, message: string) => Promise<void>;
  signal?: AbortSignal;
}

export interface BotTool<S extends TObject = TObject> {
  name: string;
  title: string;
  description: string;
  input: S;
  annotations: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean };
  run(args: Static<S>, ctx: ToolContext): Promise<unknown>;
}

const NoInput = Type.Object({}, { additionalProperties: false });

// Checkout: the route's body plus the Idempotency-Key header as an argument (the agent cannot set
// headers). Same key → the service replays the first answer and moves money once.
const CheckoutInput = Type.Object(
  {
    ...CheckoutBody.properties,
    idempotency_key: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 255,
        description:
          'One key per purchase. Reuse it when you retry the same purchase (the first answer is replayed, nothing is bought twice). Omitted: a fresh key is made and returned as idempotency_key.',
      }),
    ),
  },
  { additionalProperties: false },
);

// Query schemas leave other query parameters alone; a tool's arguments are closed.
const CheckoutStatusInput = Type.Object({ ...StatusQuery.properties }, { additionalProperties: false });

const WaitInput = Type.Object(
  {
    ...StatusQuery.properties,
    max_wait_seconds: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 900,
        description:
          'Stop waiting after this long and answer with the current status (default 50, below most clients’ 60-second call timeout). Call again to keep waiting.',
      }),
    ),
  },
  { additionalProperties: false },
);

// The route takes limit as a query-string; as a tool argument it is the number it stands for.
const MessagesInput = Type.Object(
  { limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, description: '1 to 200, default 50' })) },
  { additionalProperties: false },
);

const AckInput = Type.Object({ ...AckBody.properties }, { additionalProperties: false });

const X402PayInput = Type.Object(
  {
    ...PayBody.properties,
    idempotency_key: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 255,
        description: 'One key per payment; reuse it to retry the same payment. Omitted: made and returned.',
      }),
    ),
  },
  { additionalProperties: false },
);

const X402StatusInput = Type.Object({ payment_id: IdParam('chk') }, { additionalProperties: false });

const X402FetchInput = Type.Object(
  {
    ...FetchBody.properties,
    idempotency_key: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 255,
        description:
          'One key per resource request; reuse it to retry (the first answer is returned again, nothing is paid twice). Omitted: made and returned.',
      }),
    ),
  },
  { additionalProperties: false },
);

function tool<S extends TObject>(definition: BotTool<S>): BotTool {
  return definition as unknown as BotTool;
}

export const BOT_TOOLS: readonly BotTool[] = [
  tool({
    name: 'status',
    title: 'Bot status',
    description:
      'Your status (pending until the owner claims you, then active), payment rails, master guardrails, pending message count and webhook health. Call it first.',
    input: NoInput,
    annotations: { readOnlyHint: true },
    run: (_args, { client, signal }) => client.status(signal ? { signal } : {}),
  }),
  tool({
    name: 'wallet_check',
    title: 'Wallet balance and limits',
    description: 'Wallet balance in USD and the spending limits left today and this month.',
    input: NoInput,
    annotations: { readOnlyHint: true },
    run: (_args, { client, signal }) => client.walletCheck(signal ? { signal } : {}),
  }),
  tool({
    name: 'checkout',
    title: 'Request a purchase',
    description:
      'Ask to buy something with payment profile profile_index (1-6, from your profiles file) for amount_cents (integer US cents). Answers approved:true with the missing card digits and expiry, or approved:false with status pending_confirmation and a confirmation_id: then call wait_for_decision. Refusals are tool errors with the error code (insufficient_funds, wallet_frozen, allowance_exceeded, …). To fulfil a task, pass its instructions and task_id.',
    input: CheckoutInput,
    annotations: { destructiveHint: false, idempotentHint: true },
    async run(args, { client, signal }) {
      const { idempotency_key, ...request } = args;
      const key = idempotency_key ?? globalThis.crypto.randomUUID();
      const result = await client.checkout(request, { idempotencyKey: key, ...(signal ? { signal } : {}) });
      return { ...result, idempotency_key: key };
    },
  }),
  tool({
    name: 'checkout_status',
    title: 'Purchase status',
    description:
      'One look at a purchase held for the owner: pending, approved (with the card details), denied or expired.',
    input: CheckoutStatusInput,
    annotations: { readOnlyHint: true },
    run: (args, { client, signal }) => client.checkoutStatus(args.confirmation_id, signal ? { signal } : {}),
  }),
  tool({
    name: 'wait_for_decision',
    title: 'Wait for the owner’s decision',
    description:
      'Waits for the owner to approve or deny a held purchase (polling every 5 s, then 15 s) and answers the final status (approved with the card details, denied or expired). If max_wait_seconds pass first, answers the current pending status with still_waiting:true: call again.',
    input: WaitInput,
    annotations: { readOnlyHint: true },
    async run(args, { client, progress, signal }) {
      const maxWaitMs = (args.max_wait_seconds ?? 50) * 1000;
      let polls = 0;
      try {
        return await client.waitForDecision(args.confirmation_id, {
          maxWaitMs,
          ...(signal ? { signal } : {}),
          onPoll: (status) => {
            polls++;
            void progress?.(polls, `status ${status.status}`);
          },
        });
      } catch (error) {
        if (!isBotPayError(error, 'timeout') || error.status !== 0) throw error;
        const current = await client.checkoutStatus(args.confirmation_id, signal ? { signal } : {});
        return current.status === 'pending' ? { ...current, still_waiting: true } : current;
      }
    },
  }),
  tool({
    name: 'next_task',
    title: 'Next task',
    description:
      'The next purchase task the owner scheduled for you, leased to you for an hour (fulfil it with checkout and its task_id), or none.',
    input: NoInput,
    annotations: { readOnlyHint: false, idempotentHint: false },
    run: (_args, { client, signal }) => client.nextTask(signal ? { signal } : {}),
  }),
  tool({
    name: 'messages',
    title: 'Queued messages',
    description:
      'Events not yet delivered by webhook or acknowledged (purchase approved/denied/expired, wallet funded/frozen, tasks…), oldest first. Acknowledge them with ack_messages once handled.',
    input: MessagesInput,
    annotations: { readOnlyHint: true },
    run: (args, { client, signal }) =>
      client.messages(args.limit === undefined ? {} : { limit: args.limit }, signal ? { signal } : {}),
  }),
  tool({
    name: 'ack_messages',
    title: 'Acknowledge messages',
    description:
      'Marks events as handled (by id, evt_…) so they leave the queue and are no longer sent by webhook. Idempotent.',
    input: AckInput,
    annotations: { idempotentHint: true, destructiveHint: false },
    run: (args, { client, signal }) => client.ackMessages(args.event_ids, signal ? { signal } : {}),
  }),
  tool({
    name: 'request_topup',
    title: 'Ask the owner for funds',
    description:
      'Asks your owner to add amount_cents (integer US cents) to the wallet, with a reason they will read. Answers the request (status pending); asking again with the same amount and reason returns the open request. The answer arrives as a wallet.topup_approved (with wallet.funded), wallet.topup_declined or wallet.topup_expired message, or via topup_requests.',
    input: TopupRequestBody,
    annotations: { idempotentHint: true, destructiveHint: false },
    run: (args, { client, signal }) => client.requestTopup(args, signal ? { signal } : {}),
  }),
  tool({
    name: 'topup_requests',
    title: 'Your top-up requests',
    description:
      'Your requests for funds and their status (pending, approved, declined, expired), newest first.',
    input: NoInput,
    annotations: { readOnlyHint: true },
    run: (_args, { client, signal }) => client.topupRequests({}, signal ? { signal } : {}),
  }),
  // x402: the partner wallet rail (src/x402). Same pattern as checkout: the route's body plus the
  // Idempotency-Key as an argument; a held payment is waited for with x402_payment_status.
  tool({
    name: 'x402_pay',
    title: 'Pay an HTTP 402 resource',
    description:
      'When a resource answered 402 Payment Required (x402) and your owner turned on the partner wallet: send resource_url and the payment_requirements from that answer. Approved: retry the resource with payment_header as its PAYMENT-SIGNATURE header. Held for the owner (status pending_confirmation): poll x402_payment_status with payment_id. Refusals are tool errors (rail_not_active, rail_guardrail_violation, destination_not_allowed, insufficient_funds, …).',
    input: X402PayInput,
    annotations: { destructiveHint: false, idempotentHint: true },
    async run(args, { client, signal }) {
      const { idempotency_key, ...request } = args;
      const key = idempotency_key ?? globalThis.crypto.randomUUID();
      const result = await client.payX402(request as Parameters<BotPayClient['payX402']>[0], {
        idempotencyKey: key,
        ...(signal ? { signal } : {}),
      });
      return { ...result, idempotency_key: key };
    },
  }),
  tool({
    name: 'x402_fetch',
    title: 'Fetch a paid (HTTP 402) resource',
    description:
      'Requests url through the service (method, headers, body as you give them): when it answers 402 Payment Required (x402), the service pays from the partner wallet under your owner’s limits and lists, repeats the request with the payment and answers the resource: response.status, response.headers and response.body_text (or body_base64), with paid and payment. Held for the owner (status pending_confirmation): once x402_payment_status says approved, call x402_fetch again with the same arguments plus payment_id. Refusals are tool errors (destination_not_allowed, rail_guardrail_violation, insufficient_funds, resource_unreachable, …).',
    input: X402FetchInput,
    annotations: { destructiveHint: false, idempotentHint: true },
    async run(args, { client, signal }) {
      const { idempotency_key, ...request } = args;
      const key = idempotency_key ?? globalThis.crypto.randomUUID();
      const result = await client.fetchX402(request, { idempotencyKey: key, ...(signal ? { signal } : {}) });
      return { ...result, idempotency_key: key };
    },
  }),
  tool({
    name: 'x402_payment_status',
    title: 'x402 payment status',
    description:
      'One look at an x402 payment: pending, approved (with the signed payment), denied or expired, and its settlement.',
    input: X402StatusInput,
    annotations: { readOnlyHint: true },
    run: (args, { client, signal }) => client.x402Payment(args.payment_id, signal ? { signal } : {}),
  }),
];

/** The tools/list entry of a tool: inputSchema is the TypeBox schema as plain JSON Schema. */
export function describeTool(t: BotTool) {
  return {
    name: t.name,
    title: t.title,
    description: t.description,
    inputSchema: JSON.parse(JSON.stringify(t.input)) as { type: 'object'; [key: string]: unknown },
    annotations: { title: t.title, openWorldHint: false, ...t.annotations },
  };
}

/**
 * Runs a tool: checks the arguments against its schema (a refusal is the service's own
 * `validation_error` with the field), then calls the service. Errors the service answers — and
 * transport failures after the SDK's retries — become tool errors carrying the spec's code; any
 * other failure is a tool error `internal_error`.
 */
export async function callTool(t: BotTool, rawArgs: unknown, ctx: ToolContext): Promise<ToolOutcome> {
  const args = rawArgs ?? {};
  if (!Value.Check(t.input, args)) {
    const first = Value.Errors(t.input, args).First();
    const field = first?.path.replace(/^\//, '').replaceAll('/', '.') || undefined;
    return {
      isError: true,
      body: {
        error: 'validation_error',
        message: first ? `${field ?? 'arguments'}: ${first.message}` : 'Invalid arguments.',
        ...(field ? { field } : {}),
      },
    };
  }
  try {
    const body = (await t.run(args, ctx)) as Record<string, unknown>;
    return { isError: false, body };
  } catch (error) {
    if (isBotPayError(error)) {
      return {
        isError: true,
        body: {
          error: error.code,
          message: error.message,
          http_status: error.status,
          ...(error.retryAfterSeconds !== undefined ? { retry_after_seconds: error.retryAfterSeconds } : {}),
          ...error.details,
        },
      };
    }
    // Anything else is a fault on this side: still a tool error the agent can read, with the
    // service's code for it, rather than a broken protocol exchange.
    return {
      isError: true,
      body: { error: 'internal_error', message: error instanceof Error ? error.message : String(error) },
    };
  }
}
