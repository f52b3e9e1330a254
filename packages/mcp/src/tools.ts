import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { BotPayClient } from '../../client/src/index.ts';
import { isBotPayError } from '../../client/src/index.ts';
import { type JsonSchema, OPERATIONS, type OperationKey } from './generated.ts';

// The bot's tools for agents that speak MCP (docs/bots.md, "Agents over MCP"): the same table for
// `npx @botpay/mcp` (stdio), `botpay mcp` and the service's own endpoint at /mcp. Each tool's
// input schema is the JSON Schema of the route it calls (src/generated.ts, generated from the
// service's OpenAPI document), closed, plus the arguments that stand for headers (the checkout's
// Idempotency-Key); its output schema is the route's success answer. Arguments are checked
// against the input schema here before anything is sent. Each tool calls the bot API through the
// SDK (@botpay/client), so retries, the checkout's Idempotency-Key and the approval polling
// behave exactly as for SDK users.

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

// biome-ignore lint/suspicious/noExplicitAny: a tool's arguments are what its input schema checked.
type Args = Record<string, any>;

export interface BotTool {
  name: string;
  title: string;
  description: string;
  /** A closed JSON Schema object: the arguments are checked against it before the call. */
  input: JsonSchema;
  /** The JSON Schema of a successful answer (structuredContent). */
  output: JsonSchema;
  annotations: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean };
  run(args: Args, ctx: ToolContext): Promise<unknown>;
}

type Properties = Record<string, JsonSchema>;

function propertiesOf(schema: JsonSchema): Properties {
  return (schema.properties ?? {}) as Properties;
}

/** The route's input with `extra` arguments added and nothing else accepted. */
function inputOf(key: OperationKey, extra: Properties = {}): JsonSchema {
  const route = OPERATIONS[key].input;
  return {
    ...route,
    type: 'object',
    properties: { ...propertiesOf(route), ...extra },
    additionalProperties: false,
  };
}

/** The route's success answer, with the fields the tool adds to it. */
function outputOf(key: OperationKey, extra: Properties = {}): JsonSchema {
  const route = OPERATIONS[key].output;
  if (Object.keys(extra).length === 0) return route;
  return { ...route, type: 'object', properties: { ...propertiesOf(route), ...extra } };
}

const NO_INPUT: JsonSchema = { type: 'object', properties: {}, additionalProperties: false };

const IDEMPOTENCY_KEY = {
  type: 'string',
  minLength: 1,
  maxLength: 255,
};

const KEY_ANSWER: Properties = {
  idempotency_key: {
    type: 'string',
    description: 'The Idempotency-Key the purchase was made with: pass it again to retry it.',
  },
};

const optionalOf = (signal: AbortSignal | undefined) => (signal ? { signal } : {});

/**
 * A call made with the Idempotency-Key the agent passed as `idempotency_key` (a fresh one when it
 * passed none), answered with that key so the agent can retry the same purchase or payment.
 */
async function keyed(args: Args, call: (request: Args, key: string) => Promise<object>) {
  const { idempotency_key, ...request } = args;
  const key: string = idempotency_key ?? globalThis.crypto.randomUUID();
  return { ...(await call(request, key)), idempotency_key: key };
}

export const BOT_TOOLS: readonly BotTool[] = [
  {
    name: 'status',
    title: 'Bot status',
    description:
      'Your status (pending until the owner claims you, then active), payment rails, master guardrails, pending message count and webhook health. Call it first.',
    input: NO_INPUT,
    output: outputOf('GET /api/v1/bot/status'),
    annotations: { readOnlyHint: true },
    run: (_args, { client, signal }) => client.status(optionalOf(signal)),
  },
  {
    name: 'wallet_check',
    title: 'Wallet balance and limits',
    description: 'Wallet balance in USD and the spending limits left today and this month.',
    input: NO_INPUT,
    output: outputOf('GET /api/v1/bot/wallet/check'),
    annotations: { readOnlyHint: true },
    run: (_args, { client, signal }) => client.walletCheck(optionalOf(signal)),
  },
  {
    name: 'checkout',
    title: 'Request a purchase',
    description:
      'Ask to buy something with payment profile profile_index (1-6, from your profiles file) for amount_cents (integer US cents). Answers approved:true with the missing card digits and expiry, or approved:false with status pending_confirmation and a confirmation_id: then call wait_for_decision. Refusals are tool errors with the error code (insufficient_funds, wallet_frozen, allowance_exceeded, …). To fulfil a task, pass its instructions and task_id.',
    // The route's body plus the Idempotency-Key header as an argument (the agent cannot set
    // headers). Same key → the service replays the first answer and moves money once.
    input: inputOf('POST /api/v1/bot/merchant/checkout', {
      idempotency_key: {
        ...IDEMPOTENCY_KEY,
        description:
          'One key per purchase. Reuse it when you retry the same purchase (the first answer is replayed, nothing is bought twice). Omitted: a fresh key is made and returned as idempotency_key.',
      },
    }),
    output: outputOf('POST /api/v1/bot/merchant/checkout', KEY_ANSWER),
    annotations: { destructiveHint: false, idempotentHint: true },
    run: (args, { client, signal }) =>
      keyed(args, (request, key) =>
        client.checkout(request as Parameters<BotPayClient['checkout']>[0], {
          idempotencyKey: key,
          ...optionalOf(signal),
        }),
      ),
  },
  {
    name: 'checkout_status',
    title: 'Purchase status',
    description:
      'One look at a purchase held for the owner: pending, approved (with the card details), denied or expired.',
    input: inputOf('GET /api/v1/bot/merchant/checkout/status'),
    output: outputOf('GET /api/v1/bot/merchant/checkout/status'),
    annotations: { readOnlyHint: true },
    run: (args, { client, signal }) => client.checkoutStatus(args.confirmation_id, optionalOf(signal)),
  },
  {
    name: 'wait_for_decision',
    title: 'Wait for the owner’s decision',
    description:
      'Waits for the owner to approve or deny a held purchase (polling every 5 s, then 15 s) and answers the final status (approved with the card details, denied or expired). If max_wait_seconds pass first, answers the current pending status with still_waiting:true: call again.',
    input: inputOf('GET /api/v1/bot/merchant/checkout/status', {
      max_wait_seconds: {
        type: 'integer',
        minimum: 1,
        maximum: 900,
        description:
          'Stop waiting after this long and answer with the current status (default 50, below most clients’ 60-second call timeout). Call again to keep waiting.',
      },
    }),
    output: outputOf('GET /api/v1/bot/merchant/checkout/status', {
      still_waiting: { type: 'boolean', description: 'max_wait_seconds passed before the owner decided.' },
    }),
    annotations: { readOnlyHint: true },
    async run(args, { client, progress, signal }) {
      const maxWaitMs = (args.max_wait_seconds ?? 50) * 1000;
      let polls = 0;
      try {
        return await client.waitForDecision(args.confirmation_id, {
          maxWaitMs,
          ...optionalOf(signal),
          onPoll: (status) => {
            polls++;
            void progress?.(polls, `status ${status.status}`);
          },
        });
      } catch (error) {
        if (!isBotPayError(error, 'timeout') || error.status !== 0) throw error;
        const current = await client.checkoutStatus(args.confirmation_id, optionalOf(signal));
        return current.status === 'pending' ? { ...current, still_waiting: true } : current;
      }
    },
  },
  {
    name: 'next_task',
    title: 'Next task',
    description:
      'The next purchase task the owner scheduled for you, leased to you for an hour (fulfil it with checkout and its task_id), or none.',
    input: NO_INPUT,
    output: outputOf('POST /api/v1/bot/tasks/next'),
    annotations: { readOnlyHint: false, idempotentHint: false },
    run: (_args, { client, signal }) => client.nextTask(optionalOf(signal)),
  },
  {
    name: 'messages',
    title: 'Queued messages',
    description:
      'Events not yet delivered by webhook or acknowledged (purchase approved/denied/expired, wallet funded/frozen, tasks…), oldest first. Acknowledge them with ack_messages once handled.',
    // The route takes limit as a query-string; as a tool argument it is the number it stands for.
    input: {
      type: 'object',
      properties: {
        limit: { type: 'integer', minimum: 1, maximum: 200, description: '1 to 200, default 50' },
      },
      additionalProperties: false,
    },
    output: outputOf('GET /api/v1/bot/messages'),
    annotations: { readOnlyHint: true },
    run: (args, { client, signal }) =>
      client.messages(args.limit === undefined ? {} : { limit: args.limit }, optionalOf(signal)),
  },
  {
    name: 'ack_messages',
    title: 'Acknowledge messages',
    description:
      'Marks events as handled (by id, evt_…) so they leave the queue and are no longer sent by webhook. Idempotent.',
    input: inputOf('POST /api/v1/bot/messages/ack'),
    output: outputOf('POST /api/v1/bot/messages/ack'),
    annotations: { idempotentHint: true, destructiveHint: false },
    run: (args, { client, signal }) => client.ackMessages(args.event_ids, optionalOf(signal)),
  },
  {
    name: 'request_topup',
    title: 'Ask the owner for funds',
    description:
      'Asks your owner to add amount_cents (integer US cents) to the wallet, with a reason they will read. Answers the request (status pending); asking again with the same amount and reason returns the open request. The answer arrives as a wallet.topup_approved (with wallet.funded), wallet.topup_declined or wallet.topup_expired message, or via topup_requests.',
    input: inputOf('POST /api/v1/bot/wallet/topup-requests'),
    output: outputOf('POST /api/v1/bot/wallet/topup-requests'),
    annotations: { idempotentHint: true, destructiveHint: false },
    run: (args, { client, signal }) =>
      client.requestTopup(args as Parameters<BotPayClient['requestTopup']>[0], optionalOf(signal)),
  },
  {
    name: 'topup_requests',
    title: 'Your top-up requests',
    description:
      'Your requests for funds and their status (pending, approved, declined, expired), newest first.',
    input: NO_INPUT,
    output: outputOf('GET /api/v1/bot/wallet/topup-requests'),
    annotations: { readOnlyHint: true },
    run: (_args, { client, signal }) => client.topupRequests({}, optionalOf(signal)),
  },
  // x402: the partner wallet rail. Same pattern as checkout: the route's body plus the
  // Idempotency-Key as an argument; a held payment is waited for with x402_payment_status.
  {
    name: 'x402_pay',
    title: 'Pay an HTTP 402 resource',
    description:
      'When a resource answered 402 Payment Required (x402) and your owner turned on the partner wallet: send resource_url and the payment_requirements from that answer. Approved: retry the resource with payment_header as its PAYMENT-SIGNATURE header. Held for the owner (status pending_confirmation): poll x402_payment_status with payment_id. Refusals are tool errors (rail_not_active, rail_guardrail_violation, destination_not_allowed, insufficient_funds, …).',
    input: inputOf('POST /api/v1/bot/x402/pay', {
      idempotency_key: {
        ...IDEMPOTENCY_KEY,
        description: 'One key per payment; reuse it to retry the same payment. Omitted: made and returned.',
      },
    }),
    output: outputOf('POST /api/v1/bot/x402/pay', KEY_ANSWER),
    annotations: { destructiveHint: false, idempotentHint: true },
    run: (args, { client, signal }) =>
      keyed(args, (request, key) =>
        client.payX402(request as Parameters<BotPayClient['payX402']>[0], {
          idempotencyKey: key,
          ...optionalOf(signal),
        }),
      ),
  },
  {
    name: 'x402_fetch',
    title: 'Fetch a paid (HTTP 402) resource',
    description:
      'Requests url through the service (method, headers, body as you give them): when it answers 402 Payment Required (x402), the service pays from the partner wallet under your owner’s limits and lists, repeats the request with the payment and answers the resource: response.status, response.headers and response.body_text (or body_base64), with paid and payment. Held for the owner (status pending_confirmation): once x402_payment_status says approved, call x402_fetch again with the same arguments plus payment_id. Refusals are tool errors (destination_not_allowed, rail_guardrail_violation, insufficient_funds, resource_unreachable, …).',
    input: inputOf('POST /api/v1/bot/x402/fetch', {
      idempotency_key: {
        ...IDEMPOTENCY_KEY,
        description:
          'One key per resource request; reuse it to retry (the first answer is returned again, nothing is paid twice). Omitted: made and returned.',
      },
    }),
    output: outputOf('POST /api/v1/bot/x402/fetch', KEY_ANSWER),
    annotations: { destructiveHint: false, idempotentHint: true },
    run: (args, { client, signal }) =>
      keyed(args, (request, key) =>
        client.fetchX402(request as Parameters<BotPayClient['fetchX402']>[0], {
          idempotencyKey: key,
          ...optionalOf(signal),
        }),
      ),
  },
  {
    name: 'x402_payment_status',
    title: 'x402 payment status',
    description:
      'One look at an x402 payment: pending, approved (with the signed payment), denied or expired, and its settlement.',
    input: inputOf('GET /api/v1/bot/x402/payments/{payment_id}'),
    output: outputOf('GET /api/v1/bot/x402/payments/{payment_id}'),
    annotations: { readOnlyHint: true },
    run: (args, { client, signal }) => client.x402Payment(args.payment_id, optionalOf(signal)),
  },
];

/** The tools/list entry of a tool. */
export function describeTool(t: BotTool) {
  return {
    name: t.name,
    title: t.title,
    description: t.description,
    inputSchema: t.input as { type: 'object'; [key: string]: unknown },
    outputSchema: t.output as { type: 'object'; [key: string]: unknown },
    annotations: { title: t.title, openWorldHint: false, ...t.annotations },
  };
}

// One validator per input schema, compiled on first use. Formats are the service's to check (the
// only one in an input, a date-time, is in no tool's arguments).
let ajv: Ajv | undefined;
const validators = new WeakMap<JsonSchema, ValidateFunction>();

function validatorOf(schema: JsonSchema): ValidateFunction {
  let validate = validators.get(schema);
  if (!validate) {
    ajv ??= new Ajv({ strict: true, allErrors: false, formats: { 'date-time': true } });
    validate = ajv.compile(schema);
    validators.set(schema, validate);
  }
  return validate;
}

/** The argument an error is about (`amount_cents`, `items.0`), or undefined for the whole object. */
function fieldOf(error: ErrorObject): string | undefined {
  const path = error.instancePath.replace(/^\//, '').replaceAll('/', '.');
  const params = error.params as { missingProperty?: string; additionalProperty?: string };
  const child = params.missingProperty ?? params.additionalProperty;
  if (child !== undefined) return path ? `${path}.${child}` : child;
  return path || undefined;
}

/**
 * Runs a tool: checks the arguments against its schema (a refusal is the service's own
 * `validation_error` with the field), then calls the service. Errors the service answers — and
 * transport failures after the SDK's retries — become tool errors carrying the spec's code; any
 * other failure is a tool error `internal_error`.
 */
export async function callTool(t: BotTool, rawArgs: unknown, ctx: ToolContext): Promise<ToolOutcome> {
  const args = rawArgs ?? {};
  const validate = validatorOf(t.input);
  if (!validate(args)) {
    const first = validate.errors?.[0];
    const field = first ? fieldOf(first) : undefined;
    const what =
      first?.params && 'additionalProperty' in first.params
        ? 'is not an argument of this tool'
        : first?.message;
    return {
      isError: true,
      body: {
        error: 'validation_error',
        message: first ? `${field ?? 'arguments'}: ${what}` : 'Invalid arguments.',
        ...(field ? { field } : {}),
      },
    };
  }
  try {
    const body = (await t.run(args as Args, ctx)) as Record<string, unknown>;
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
