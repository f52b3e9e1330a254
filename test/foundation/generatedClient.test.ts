import { mkdir, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import createClient from 'openapi-fetch';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// Issue 33, item 3: query parameters are read by their declared types. A client is generated from
// the served /openapi.json by a real generator (openapi-typescript: the document's types;
// openapi-fetch: the typed fetch client over them), and every query parameter the document types
// as integer, number or boolean is sent through it to a real HTTP server: typed values are
// accepted (200), and the generated types refuse a string where the document says otherwise
// (checked by compiling calls with the TypeScript compiler).

interface Parameter {
  in: string;
  name: string;
  schema?: { type?: string | string[]; minimum?: number; maximum?: number };
}
interface TypedQuery {
  path: string;
  name: string;
  type: 'integer' | 'number' | 'boolean';
  minimum: number;
  maximum: number;
  pathParams: string[];
  audience: 'bot' | 'owner';
}

const OUT_DIR = resolve('test-artifacts', `generated-client-${process.pid}`);

let svc: TestService;
let base: string;
let doc: { paths: Record<string, Record<string, { parameters?: Parameter[] }>> };

beforeAll(async () => {
  // The partner wallet rail on, with an RPC endpoint that refuses at once (the refresh's chain read
  // fails and is logged; the answer is the stored wallet): the chain is not what this test is about.
  svc = await createTestService({
    env: { X402_NETWORK: 'base-sepolia', X402_RPC_URL: 'http://127.0.0.1:9', LOG_LEVEL: 'error' },
  });
  await svc.app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(svc.app.server.address() as AddressInfo).port}`;
  doc = (await (await fetch(`${base}/openapi.json`)).json()) as typeof doc;
});
afterAll(async () => {
  await svc.close();
  await rm(OUT_DIR, { recursive: true, force: true });
});

/** Every GET query parameter the document types as something other than a string. */
function typedQueries(): TypedQuery[] {
  const out: TypedQuery[] = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    const op = ops.get;
    if (!op) continue;
    const params = op.parameters ?? [];
    for (const p of params) {
      if (p.in !== 'query') continue;
      const type = [p.schema?.type].flat()[0];
      if (type !== 'integer' && type !== 'number' && type !== 'boolean') continue;
      out.push({
        path,
        name: p.name,
        type,
        minimum: p.schema?.minimum ?? 1,
        maximum: p.schema?.maximum ?? 1000,
        pathParams: params.filter((q) => q.in === 'path').map((q) => q.name),
        audience: path.startsWith('/api/v1/bot/') ? 'bot' : 'owner',
      });
    }
  }
  return out;
}

describe('a client generated from /openapi.json', () => {
  it('finds the typed query parameters: the documented limits are integers, refresh a boolean', () => {
    const found = typedQueries().map((q) => `${q.path}?${q.name}:${q.type}`);
    expect(found).toEqual(
      expect.arrayContaining([
        '/api/v1/owner/bots/{bot_id}/x402?refresh:boolean',
        '/api/v1/owner/bots/{bot_id}/x402/payments?limit:integer',
        '/api/v1/bot/messages?limit:integer',
        '/api/v1/owner/bots/{bot_id}/transactions?limit:integer',
        '/api/v1/owner/topup-requests?limit:integer',
      ]),
    );
    // No `limit` is typed as a string any more.
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const p of ops.get?.parameters ?? []) {
        if (p.in === 'query' && p.name === 'limit') expect(p.schema?.type, path).toBe('integer');
      }
    }
  });

  it('generated types take each typed parameter as its type and refuse it as a string', async () => {
    const schema = astToString(await openapiTS(doc as never));
    await mkdir(OUT_DIR, { recursive: true });
    await writeFile(join(OUT_DIR, 'schema.ts'), schema);
    const lines = [
      "import createClient from 'openapi-fetch';",
      "import type { paths } from './schema';",
      "const client = createClient<paths>({ baseUrl: 'http://localhost' });",
    ];
    for (const q of typedQueries()) {
      const path = `{ ${q.pathParams.map((n) => `${n}: 'x'`).join(', ')} }`;
      const value = q.type === 'boolean' ? 'true' : String(q.minimum);
      // The typed call compiles…
      lines.push(
        `void client.GET('${q.path}', { params: { ${q.pathParams.length ? `path: ${path}, ` : ''}query: { ${q.name}: ${value} } } });`,
      );
      // …and the same parameter as a string does not.
      lines.push('// @ts-expect-error the document does not type it as a string');
      lines.push(
        `void client.GET('${q.path}', { params: { ${q.pathParams.length ? `path: ${path}, ` : ''}query: { ${q.name}: '${value}' } } });`,
      );
    }
    const calls = join(OUT_DIR, 'calls.ts');
    await writeFile(calls, `${lines.join('\n')}\n`);
    const program = ts.createProgram([calls], {
      strict: true,
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      skipLibCheck: true,
      types: [],
      lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
    });
    const problems = ts
      .getPreEmitDiagnostics(program)
      .map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    expect(problems, problems.join('\n')).toEqual([]);
  }, 60_000);

  it('sends every typed query parameter through the generated client to a real server: 200, and a wrongly typed value 400', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const rail = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active' },
    });
    expect(rail.statusCode, rail.body).toBe(200);
    const queries = typedQueries();
    expect(queries.length).toBeGreaterThanOrEqual(9);
    for (const q of queries) {
      const client = createClient<never>({
        baseUrl: base,
        headers: q.audience === 'bot' ? bot.auth : owner.auth,
      });
      const path = Object.fromEntries(
        q.pathParams.map((n) => {
          if (n !== 'bot_id') throw new Error(`no value for path parameter ${n} of ${q.path}`);
          return [n, bot.bot_id];
        }),
      );
      const values = q.type === 'boolean' ? [true, false] : [q.minimum, q.maximum];
      for (const value of values) {
        const { response, error } = await (
          client as unknown as {
            GET: (p: string, o: unknown) => Promise<{ response: Response; error?: unknown }>;
          }
        ).GET(q.path, { params: { path, query: { [q.name]: value } } });
        expect(response.status, `${q.path}?${q.name}=${value} → ${JSON.stringify(error)}`).toBe(200);
      }
      // The raw text a hand-written client might send instead, when it is not of the type: refused.
      const url = `${base}${q.path.replace('{bot_id}', bot.bot_id)}?${q.name}=${q.type === 'boolean' ? 'maybe' : 'five'}`;
      const wrong = await fetch(url, { headers: q.audience === 'bot' ? bot.auth : owner.auth });
      expect(wrong.status, url).toBe(400);
      expect(((await wrong.json()) as { error: string }).error).toBe('validation_error');
    }
  });

  it('honours what the typed parameters say', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    for (const cents of [100, 200]) {
      await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
        headers: owner.auth,
        payload: { amount_cents: cents },
      });
    }
    const res = await fetch(`${base}/api/v1/owner/bots/${bot.bot_id}/transactions?limit=2`, {
      headers: owner.auth,
    });
    expect(((await res.json()) as { transactions: unknown[] }).transactions).toHaveLength(2);
    const messages = await fetch(`${base}/api/v1/bot/messages?limit=1`, { headers: bot.auth });
    expect(((await messages.json()) as { messages: unknown[] }).messages).toHaveLength(1);
  });
});
