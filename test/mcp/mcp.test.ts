import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CheckoutBody } from '../../src/checkout/schemas.ts';
import { ERROR_STATUS } from '../../src/platform/errors.ts';
import { checkout, DIGITS, purchase, setupCard, type TestCard } from '../checkout/helpers.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';

// The bot's MCP tools as agents reach them, through the official MCP client over both transports:
// stdio (`botpay mcp`, spawned as an agent spawns it, calling the service on 127.0.0.1 with the
// key from its environment) and Streamable HTTP (the service's own /mcp, the key as the bearer).
// Every tool declares an output schema, and the SDK client checks each structuredContent against
// it, so every successful call below also proves the answer matches the schema. Nothing is mocked.

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

interface ToolAnswer {
  isError?: boolean;
  content: { type: string; text: string }[];
  structuredContent?: Record<string, unknown>;
}

const TOOL_NAMES = [
  'ack_messages',
  'checkout',
  'checkout_status',
  'messages',
  'next_task',
  'request_topup',
  'status',
  'topup_requests',
  'x402_pay',
  'x402_fetch',
  'x402_payment_status',
  'wait_for_decision',
  'wallet_check',
].sort();

let svc: TestService;
let owner: TestOwner;
let baseUrl: string;
let stderr = '';

beforeAll(async () => {
  // Request lines are at debug in development (BASE_URL on localhost, as here): the hang-up test
  // below counts the wait's polls in them.
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000', LOG_LEVEL: 'debug' } });
  baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
  owner = await createOwner(svc);
}, 120_000);

afterAll(async () => {
  await svc?.close();
});

async function stdioClient(env: Record<string, string>): Promise<Client> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [join(REPO, 'bin/botpay.mjs'), 'mcp'],
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', ...env },
    stderr: 'pipe',
  });
  transport.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const c = new Client({ name: 'botpay-test-agent', version: '1.0.0' });
  await c.connect(transport);
  return c;
}

async function httpClient(apiKey: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${apiKey}` } },
  });
  const c = new Client({ name: 'botpay-test-agent', version: '1.0.0' });
  await c.connect(transport);
  return c;
}

const TRANSPORTS = {
  stdio: (apiKey: string) => stdioClient({ BOTPAY_API_KEY: apiKey, BOTPAY_URL: baseUrl }),
  'Streamable HTTP': httpClient,
};

describe.each(Object.entries(TRANSPORTS))(
  'the bot tools over %s against a real service',
  (_name, connect) => {
    let bot: Awaited<ReturnType<typeof activeBot>>;
    let card: TestCard;
    let client: Client;

    beforeAll(async () => {
      bot = await activeBot(svc, owner, { fundCents: 1000 });
      card = await setupCard(svc, owner, bot.bot_id);
      client = await connect(bot.api_key);
    }, 120_000);

    afterAll(async () => {
      await client?.close();
    });

    async function call(
      name: string,
      args: Record<string, unknown> = {},
      onprogress?: (p: { progress: number; message?: string }) => void,
    ) {
      const answer = (await client.callTool({ name, arguments: args }, undefined, {
        timeout: 60_000,
        ...(onprogress ? { onprogress } : {}),
      })) as ToolAnswer;
      const text = answer.content[0]?.text ?? '';
      return { isError: answer.isError === true, body: JSON.parse(text) as Record<string, unknown>, answer };
    }

    it('lists the bot tools with the routes’ schemas as input schemas and an output schema each', async () => {
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual(TOOL_NAMES);
      const checkoutTool = tools.find((t) => t.name === 'checkout')!;
      // The very schema the route validates with, plus the idempotency key.
      const routeSchema = JSON.parse(JSON.stringify(CheckoutBody));
      expect(checkoutTool.inputSchema.properties).toMatchObject(routeSchema.properties);
      expect(checkoutTool.inputSchema.required).toEqual(routeSchema.required);
      expect(checkoutTool.inputSchema.properties).toHaveProperty('idempotency_key');
      expect(tools.find((t) => t.name === 'status')!.annotations?.readOnlyHint).toBe(true);
      for (const t of tools) expect(t.outputSchema?.type, t.name).toBe('object');
      expect(checkoutTool.outputSchema?.properties).toHaveProperty('idempotency_key');
    });

    it('status and wallet_check answer the service’s own JSON', async () => {
      const status = await call('status');
      expect(status.isError).toBe(false);
      expect(status.body).toMatchObject({ bot_id: bot.bot_id, status: 'active' });
      expect(status.answer.structuredContent).toEqual(status.body);
      const wallet = await call('wallet_check');
      expect(wallet.isError).toBe(false);
      expect(wallet.body).toMatchObject({ balance_usd: 10 });
    });

    it('checkout is idempotent by key; wait_for_decision returns the owner’s approval with the card details', async () => {
      const key = `mcp-${_name}-${Date.now()}`;
      const first = await call('checkout', {
        ...purchase(card.real_profile_index, 400),
        idempotency_key: key,
      });
      expect(first.isError, JSON.stringify(first.body)).toBe(false);
      expect(first.body).toMatchObject({
        approved: false,
        status: 'pending_confirmation',
        idempotency_key: key,
      });
      const id = first.body.confirmation_id as string;

      // The agent retries the same purchase (e.g. it lost the answer): replayed, not bought twice.
      const again = await call('checkout', {
        ...purchase(card.real_profile_index, 400),
        idempotency_key: key,
      });
      expect(again.body.confirmation_id).toBe(id);
      const approvals = await svc.app.inject({ url: '/api/v1/owner/approvals', headers: owner.auth });
      expect(
        approvals.json().approvals.filter((a: { confirmation_id: string }) => a.confirmation_id === id),
      ).toHaveLength(1);

      const polled = await call('checkout_status', { confirmation_id: id });
      expect(polled.body).toMatchObject({ confirmation_id: id, status: 'pending' });

      // A short wait that ends before the owner decides answers the pending status, not an error.
      // The agent asked for progress: each poll is reported while it waits.
      const progress: string[] = [];
      const short = await call('wait_for_decision', { confirmation_id: id, max_wait_seconds: 1 }, (p) =>
        progress.push(p.message ?? ''),
      );
      expect(short.isError).toBe(false);
      expect(short.body).toMatchObject({ status: 'pending', still_waiting: true });
      expect(progress.length).toBeGreaterThanOrEqual(1);
      expect(progress[0]).toBe('status pending');

      const waiting = call('wait_for_decision', { confirmation_id: id, max_wait_seconds: 60 });
      await new Promise((r) => setTimeout(r, 500));
      const approve = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${id}/approve`,
        headers: owner.auth,
      });
      expect(approve.statusCode, approve.body).toBe(200);
      const decided = await waiting;
      expect(decided.isError).toBe(false);
      expect(decided.body).toMatchObject({ confirmation_id: id, status: 'approved', missing_digits: DIGITS });
    }, 60_000);

    it('refusals are tool errors with the spec’s codes; bad arguments are validation_error; an unknown tool is said once', async () => {
      const broke = await call('checkout', purchase(card.real_profile_index, 500_000));
      expect(broke.isError).toBe(true);
      expect(typeof broke.body.error).toBe('string');
      expect(broke.body.http_status).toBeGreaterThanOrEqual(400);
      // An error carries its envelope as text only: structuredContent is for the output schema.
      expect(broke.answer.structuredContent).toBeUndefined();
      // The same refusal the HTTP route gives for the same request.
      const direct = await checkout(svc, bot, purchase(card.real_profile_index, 500_000));
      expect(broke.body.error).toBe(direct.json().error);

      const badProfile = await call('checkout', purchase(9, 100));
      expect(badProfile).toMatchObject({ isError: true, body: { error: 'invalid_profile' } });

      const bad = await call('checkout', { ...purchase(card.real_profile_index, 100), amount_cents: 'lots' });
      expect(bad).toMatchObject({
        isError: true,
        body: { error: 'validation_error', field: 'amount_cents' },
      });
      const extra = await call('checkout', { ...purchase(card.real_profile_index, 100), currency: 'EUR' });
      expect(extra).toMatchObject({ isError: true, body: { error: 'validation_error', field: 'currency' } });
      const missing = await call('checkout', { profile_index: 1 });
      expect(missing).toMatchObject({
        isError: true,
        body: { error: 'validation_error', field: 'merchant_name' },
      });

      const unknown = await call('checkout_status', { confirmation_id: 'chk_aaaaaaaaaaaaaaaa' });
      expect(unknown).toMatchObject({ isError: true, body: { error: 'not_found', http_status: 404 } });

      await expect(client.callTool({ name: 'transfer_everything', arguments: {} })).rejects.toThrow(
        /^MCP error -32602: Unknown tool: transfer_everything$/,
      );

      // x402 through the same path: this service has no partner wallet rail configured, and says so.
      const x402 = await call('x402_pay', {
        resource_url: 'https://api.example.com/paid',
        payment_requirements: { scheme: 'exact', network: 'eip155:8453', amount: '10000' },
      });
      expect(x402).toMatchObject({ isError: true, body: { error: 'rail_not_active', http_status: 403 } });
      const noPayment = await call('x402_payment_status', { payment_id: 'chk_aaaaaaaaaaaaaaaa' });
      expect(noPayment).toMatchObject({ isError: true, body: { error: 'not_found' } });
    });

    it('next_task, messages and ack_messages work through the queue', async () => {
      const task = await call('next_task');
      expect(task.isError).toBe(false);
      const messages = await call('messages', { limit: 200 });
      expect(messages.isError).toBe(false);
      const list = messages.body.messages as { id: string; event: string }[];
      expect(list.map((m) => m.event)).toContain('wallet.funded');
      const ids = list.map((m) => m.id);
      const ack = await call('ack_messages', { event_ids: ids });
      expect(ack.body).toMatchObject({ acknowledged: ids, not_found: [] });
      const after = await call('messages', { limit: 200 });
      expect((after.body.messages as { id: string }[]).map((m) => m.id)).not.toContain(ids[0]);
      const asked = await call('request_topup', { amount_cents: 2500, reason: 'API credits for the week' });
      expect(asked).toMatchObject({ isError: false, body: { status: 'pending', amount_usd: 25 } });
      const again = await call('request_topup', { amount_cents: 2500, reason: 'API credits for the week' });
      expect(again.body.topup_id).toBe(asked.body.topup_id);
      const listed = await call('topup_requests');
      expect((listed.body.topup_requests as { topup_id: string }[]).map((t) => t.topup_id)).toEqual([
        asked.body.topup_id,
      ]);
      const badLimit = await call('messages', { limit: 0 });
      expect(badLimit).toMatchObject({ isError: true, body: { error: 'validation_error', field: 'limit' } });
    });
  },
);

describe('stdio: botpay mcp', () => {
  it('a wrong API key gives tool errors saying authentication is required; no key refuses to start', async () => {
    const other = await stdioClient({ BOTPAY_API_KEY: `svc_live_${'0'.repeat(48)}`, BOTPAY_URL: baseUrl });
    try {
      const answer = (await other.callTool({ name: 'status', arguments: {} })) as ToolAnswer;
      expect(answer.isError).toBe(true);
      expect(JSON.parse(answer.content[0]!.text)).toMatchObject({
        error: 'Authentication required',
        http_status: 401,
      });
    } finally {
      await other.close();
    }
    stderr = '';
    await expect(stdioClient({ BOTPAY_URL: baseUrl })).rejects.toThrow();
    expect(stderr).toContain('BOTPAY_API_KEY');
    expect(stderr).not.toContain('warning');
    // Plain http to another host: it starts (nothing is sent yet) but says the key would be exposed.
    const bot = await activeBot(svc, owner);
    stderr = '';
    const remote = await stdioClient({ BOTPAY_API_KEY: bot.api_key, BOTPAY_URL: 'http://pay.example.com' });
    // stderr is its own pipe: give the line a moment to arrive.
    for (let i = 0; i < 50 && !stderr.includes('plain http'); i++)
      await new Promise((r) => setTimeout(r, 20));
    await remote.close();
    expect(stderr).toContain('BOTPAY_URL is plain http to pay.example.com');
    expect(stderr).not.toContain(bot.api_key);
  });
});

describe('Streamable HTTP: /mcp as a passer-by or another bot meets it', () => {
  const initialize = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
  });
  const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

  it('answers 401 with a Bearer challenge, before reading any MCP message, without a valid key', async () => {
    for (const authorization of [
      undefined,
      'Bearer nope',
      `Bearer svc_live_${'0'.repeat(48)}`,
      'Basic Ym90OnBheQ==',
    ]) {
      const res = await fetch(`${baseUrl}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...(authorization ? { authorization } : {}) },
        body: initialize,
      });
      expect(res.status, String(authorization)).toBe(401);
      expect(res.headers.get('www-authenticate')).toBe('Bearer realm="botpay"');
      expect(await res.json()).toMatchObject({ error: 'Authentication required' });
    }
    // A web page elsewhere (DNS rebinding, a page the owner opened) is refused even with a key.
    const bot = await activeBot(svc, owner);
    const page = await fetch(`${baseUrl}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${bot.api_key}`, origin: 'https://evil.example' },
      body: initialize,
    });
    expect(page.status).toBe(403);
    expect(await page.json()).toMatchObject({ error: 'forbidden' });
    // The official client with a wrong key cannot even initialise.
    await expect(httpClient(`svc_live_${'0'.repeat(48)}`)).rejects.toThrow();
  });

  it('is stateless: POST only (GET and DELETE are 405), no session id, any request on its own', async () => {
    const bot = await activeBot(svc, owner);
    for (const method of ['GET', 'DELETE']) {
      const res = await fetch(`${baseUrl}/mcp`, {
        method,
        headers: { authorization: `Bearer ${bot.api_key}` },
      });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow')).toBe('POST');
    }
    const init = await fetch(`${baseUrl}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${bot.api_key}` },
      body: initialize,
    });
    expect(init.status).toBe(200);
    expect(init.headers.get('mcp-session-id')).toBeNull();
    expect(await init.text()).toContain('"serverInfo"');
    // A tools/call with no initialize before it: each request stands alone.
    const res = await fetch(`${baseUrl}/mcp`, {
      method: 'POST',
      headers: {
        ...MCP_HEADERS,
        authorization: `Bearer ${bot.api_key}`,
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'status', arguments: {} },
      }),
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain(bot.bot_id);
  });

  it('refuses bodies that are not JSON or too large with the service’s 4xx', async () => {
    const bot = await activeBot(svc, owner);
    const auth = { authorization: `Bearer ${bot.api_key}` };
    const text = await fetch(`${baseUrl}/mcp`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'text/plain', accept: MCP_HEADERS.accept },
      body: initialize,
    });
    expect(text.status).toBe(415);
    const broken = await fetch(`${baseUrl}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...auth },
      body: '{"jsonrpc":',
    });
    expect(broken.status).toBe(400);
    const huge = await fetch(`${baseUrl}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...auth },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping', params: { pad: 'x'.repeat(1_100_000) } }),
    });
    expect(huge.status).toBe(413);
  });

  it('one bot’s key reaches only that bot: another bot’s purchase is not found', async () => {
    const alice = await activeBot(svc, owner, { fundCents: 1000 });
    const aliceCard = await setupCard(svc, owner, alice.bot_id);
    const held = await checkout(svc, alice, purchase(aliceCard.real_profile_index, 300));
    const id = held.json().confirmation_id as string;
    expect(id).toMatch(/^chk_/);
    const mallory = await activeBot(svc, await createOwner(svc));
    const client = await httpClient(mallory.api_key);
    try {
      const answer = (await client.callTool({
        name: 'checkout_status',
        arguments: { confirmation_id: id },
      })) as ToolAnswer;
      expect(answer.isError).toBe(true);
      expect(JSON.parse(answer.content[0]!.text)).toMatchObject({ error: 'not_found', http_status: 404 });
      const status = (await client.callTool({ name: 'status', arguments: {} })) as ToolAnswer;
      expect(status.structuredContent).toMatchObject({ bot_id: mallory.bot_id });
    } finally {
      await client.close();
    }
  });

  it('a hostile agent’s arguments get tool errors with the spec’s codes, never a protocol fault', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 100 });
    const client = await httpClient(bot.api_key);
    try {
      const { tools } = await client.listTools();
      const junk = fc.oneof(fc.anything(), fc.string(), fc.integer(), fc.constant('chk_aaaaaaaaaaaaaaaa'));
      const call = fc.constantFrom(...tools).chain((t) =>
        fc.record({
          name: fc.constant(t.name),
          arguments: fc.oneof(
            fc.dictionary(fc.constantFrom(...Object.keys(t.inputSchema.properties ?? {}), 'extra'), junk),
            fc.object(),
          ),
        }),
      );
      await fc.assert(
        fc.asyncProperty(call, async ({ name, arguments: args }) => {
          if (name === 'wait_for_decision') args.max_wait_seconds = 1;
          // The SDK client rejects on a protocol error, and on an answer its output schema refuses.
          const answer = (await client.callTool({ name, arguments: args }, undefined, {
            timeout: 20_000,
          })) as ToolAnswer;
          if (answer.isError) {
            const body = JSON.parse(answer.content[0]?.text ?? '{}') as { error?: string };
            expect(Object.keys(ERROR_STATUS), JSON.stringify(body)).toContain(body.error);
            expect(body.error).not.toBe('internal_error');
          }
        }),
        { numRuns: 60, seed: 31 },
      );
    } finally {
      await client.close();
    }
  }, 120_000);

  it('an agent that hangs up stops the wait: no polling goes on for a request nobody reads', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id);
    const held = await checkout(svc, bot, purchase(card.real_profile_index, 200));
    const id = held.json().confirmation_id as string;
    const polls = () => svc.logs().split(`confirmation_id=${id}`).length - 1;
    const hangUp = new AbortController();
    const waiting = fetch(`${baseUrl}/mcp`, {
      method: 'POST',
      headers: {
        ...MCP_HEADERS,
        authorization: `Bearer ${bot.api_key}`,
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: { name: 'wait_for_decision', arguments: { confirmation_id: id, max_wait_seconds: 900 } },
      }),
      signal: hangUp.signal,
    }).then((res) => res.text());
    for (let i = 0; i < 100 && polls() === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(polls()).toBeGreaterThan(0);
    hangUp.abort();
    await waiting.catch(() => {});
    const after = polls();
    // The first poll interval is 5 s: past it, a wait still running would have polled again.
    await new Promise((r) => setTimeout(r, 6_000));
    expect(polls()).toBe(after);
  }, 30_000);
});
