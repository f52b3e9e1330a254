import fc from 'fast-check';
import { ERROR_STATUS, type ErrorCode } from '../../src/platform/errors.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import { type SampleSchema, sampleBody } from './samples.ts';

// Property-based hostile input over every route of the OpenAPI document (so routes added later
// are covered without touching this file): malformed, oversized, wrongly typed, unicode-heavy and
// injection-shaped bodies, query strings and headers. Never a 5xx, never a state change, and the
// expected 4xx code. Every string field and string query parameter also gets NUL with control
// characters, lone surrogates and very long text around it (refused with a service code, nothing
// stored), and control characters without NUL (never a 5xx).

interface Operation {
  method: string;
  path: string;
  body?: { properties?: Record<string, SampleSchema>; required?: string[] };
  /** Query parameters of type string. */
  query: string[];
}

const INJECTIONS = [
  "' OR '1'='1",
  "'; DROP TABLE bots; --",
  '"><script>alert(1)</script>',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a template-injection probe, on purpose
  '${7*7}',
  '{{constructor.constructor("return process")()}}',
  '../../../../etc/passwd',
  '\u0000\u0001\u0002',
  '\ud800',
  '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃ ﷽ 𒐫 👩‍👩‍👧‍👦',
  '%00%0d%0aSet-Cookie: x=y',
  '__proto__',
];

const hostileString = fc.oneof(
  fc.constantFrom(...INJECTIONS),
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.string({ unit: 'grapheme', maxLength: 100 }),
  fc.nat({ max: 20_000 }).map((n) => 'x'.repeat(n)),
);

// Control characters (C0, DEL, C1), lone surrogates, and what else breaks text handling.
const CONTROL_CHARS = [
  ...Array.from({ length: 32 }, (_, i) => String.fromCharCode(i)),
  '\u007f',
  '\u0085',
  '\u009b',
  '\u2028',
  '\u2029',
  '\ufeff',
  '\ud800',
  '\udfff',
  '\udc00\ud800',
];

/**
 * A string with at least one NUL, which no string field may store: anything around it drawn from
 * control characters, lone surrogates, unicode and injections, sometimes very long (up to 200 KB).
 */
const nulString: fc.Arbitrary<string> = fc
  .tuple(
    fc.oneof(fc.constant(''), fc.constantFrom(...INJECTIONS), fc.string({ unit: 'binary', maxLength: 40 })),
    fc.array(fc.constantFrom(...CONTROL_CHARS), { maxLength: 6 }),
    fc.oneof(
      { weight: 4, arbitrary: fc.string({ unit: 'grapheme', maxLength: 30 }) },
      { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 200_000 }).map((n) => 'y'.repeat(n)) },
    ),
  )
  .map(([before, controls, after]) => `${before}\u0000${controls.join('')}${after}`);

/** Control characters, lone surrogates or great length, but no NUL: may be stored, never a 5xx. */
const controlString: fc.Arbitrary<string> = fc.oneof(
  fc
    .array(fc.constantFrom(...CONTROL_CHARS.filter((c) => c !== '\u0000')), { minLength: 1, maxLength: 8 })
    .map((cs) => `a${cs.join('')}b`),
  fc.constantFrom('\ud800', 'x\udfffx', '\ud83d', 'ok\ud800\u0001\u001b[31m'),
  fc.integer({ min: 1_000, max: 200_000 }).map((n) => 'z'.repeat(n)),
);

const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  hostileString,
  fc.double(),
  fc.integer(),
  fc.constantFrom(Number.MAX_SAFE_INTEGER, -1, 0, 1e308, -0),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.jsonValue(), { maxLength: 5 }),
  fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue(), { maxKeys: 5 }),
  fc.constant({ __proto__: { polluted: true } }),
);

function operations(svc: TestService): Operation[] {
  const doc = svc.app.swagger() as {
    paths: Record<
      string,
      Record<
        string,
        {
          requestBody?: { content?: Record<string, { schema?: Operation['body'] }> };
          parameters?: Array<{ in: string; name: string; schema?: SampleSchema }>;
        }
      >
    >;
  };
  const ops: Operation[] = [];
  for (const [path, methods] of Object.entries(doc.paths)) {
    if (!path.startsWith('/api/')) continue;
    for (const [method, op] of Object.entries(methods)) {
      ops.push({
        method: method.toUpperCase(),
        path,
        body: op.requestBody?.content?.['application/json']?.schema,
        query: (op.parameters ?? [])
          .filter((p) => p.in === 'query' && isStringSchema(p.schema))
          .map((p) => p.name),
      });
    }
  }
  return ops;
}

function isStringSchema(schema: SampleSchema | undefined): boolean {
  if (!schema) return false;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  return types.includes('string') || (schema.anyOf ?? []).some(isStringSchema);
}

/** Percent-encodes a path segment; a lone surrogate becomes a malformed escape on purpose. */
function encodeSegment(value: string): string {
  try {
    return encodeURIComponent(value) || 'x';
  } catch {
    return '%ED%A0%80%E0%A4%A';
  }
}

function wrongTypeFor(type: string | string[] | undefined): fc.Arbitrary<unknown> {
  const types = Array.isArray(type) ? type : [type ?? 'string'];
  const candidates: fc.Arbitrary<unknown>[] = [];
  if (!types.includes('string')) candidates.push(hostileString);
  if (!types.includes('integer') && !types.includes('number'))
    candidates.push(fc.integer(), fc.double({ noNaN: true }));
  if (!types.includes('boolean')) candidates.push(fc.boolean());
  if (!types.includes('object'))
    candidates.push(fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue(), { maxKeys: 3 }));
  if (!types.includes('array')) candidates.push(fc.array(fc.jsonValue(), { maxLength: 3 }));
  if (!types.includes('null')) candidates.push(fc.constant(null));
  return fc.oneof(...candidates);
}

describe('hostile input on every route', () => {
  let svc: TestService;
  let owner: TestOwner;
  let bot: Awaited<ReturnType<typeof activeBot>>;

  beforeAll(async () => {
    // Limits high enough that every request reaches the field under test instead of a 429.
    svc = await createTestService({
      env: {
        LOG_LEVEL: 'silent',
        REGISTRATION_RATE_LIMIT_PER_HOUR: '1000000',
        CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000',
      },
    });
    owner = await createOwner(svc);
    bot = await activeBot(svc, owner, { fundCents: 5000 });
  });
  afterAll(async () => {
    await svc.close();
  });

  async function snapshot(): Promise<string> {
    const tables = await svc.ctx.db.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables
        WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
          AND table_name NOT IN ('rate_limits', 'rate_limit_hits', 'schema_migrations', 'schema_functions') ORDER BY table_name`,
    );
    const parts: string[] = [];
    for (const { table_name } of tables) {
      const rows = await svc.ctx.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${table_name}"`);
      parts.push(`${table_name}=${rows[0]?.n}`);
    }
    const money = await svc.ctx.db.query(
      'SELECT bot_id, status, available_micros, held_micros FROM wallets ORDER BY bot_id',
    );
    return `${parts.join(',')}|${JSON.stringify(money)}`;
  }

  const fillPath = (path: string) =>
    path.replace(/\{(\w+)\}/g, (_m, name: string) =>
      name === 'bot_id' ? bot.bot_id : name === 'rail_key' ? 'card_wallet' : 'x_aaaaaaaaaaaaaaaa',
    );

  it('unauthenticated: random bodies, headers and query strings never cause a 5xx or a change', async () => {
    const before = await snapshot();
    for (const op of operations(svc)) {
      await fc.assert(
        fc.asyncProperty(
          fc.option(hostileValue, { nil: undefined }),
          fc.dictionary(
            fc.constantFrom(
              'authorization',
              'content-type',
              'x-forwarded-for',
              'x-request-id',
              'idempotency-key',
              'cookie',
            ),
            hostileString,
            { maxKeys: 3 },
          ),
          fc.option(fc.dictionary(fc.string({ maxLength: 8 }), hostileString, { maxKeys: 3 }), {
            nil: undefined,
          }),
          async (body, headers, query) => {
            const safeHeaders = Object.fromEntries(
              Object.entries(headers).filter(([, v]) => /^[\x20-\x7e]*$/.test(v) && v.length < 4000),
            );
            // A real registration could slip through with valid random data; keep it unauthenticated-invalid.
            if (op.path === '/api/v1/bots/register') safeHeaders['content-type'] = 'application/json';
            const qs = query ? `?${new URLSearchParams(query).toString()}` : '';
            const res = await svc.app.inject({
              method: op.method as 'POST',
              url: fillPath(op.path) + qs,
              headers: safeHeaders,
              ...(body === undefined || op.method === 'GET' ? {} : { payload: JSON.stringify(body) }),
            });
            expect(res.statusCode, `${op.method} ${op.path} → ${res.body.slice(0, 200)}`).toBeLessThan(500);
            expect(() => res.json()).not.toThrow();
            if (op.path.startsWith('/api/v1/bot/') || op.path.startsWith('/api/v1/owner/')) {
              expect(res.statusCode, `${op.method} ${op.path}`).toBe(401);
            }
          },
        ),
        { numRuns: 25 },
      );
    }
    // Registration may have succeeded for a random body only if it was valid; nothing else changed.
    const after = await snapshot();
    expect(after.replace(/bots=\d+|wallets=\d+|events=\d+/g, '')).toBe(
      before.replace(/bots=\d+|wallets=\d+|events=\d+/g, ''),
    );
  });

  it('authenticated: each body field replaced by a wrongly typed value → 400 validation_error, nothing changes', async () => {
    const before = await snapshot();
    let checked = 0;
    for (const op of operations(svc)) {
      const props = Object.entries(op.body?.properties ?? {});
      if (props.length === 0) continue;
      const auth = op.path.startsWith('/api/v1/bot/')
        ? bot.auth
        : op.path.startsWith('/api/v1/owner/')
          ? owner.auth
          : {};
      for (const [name, schema] of props) {
        await fc.assert(
          fc.asyncProperty(wrongTypeFor(schema.type), async (value) => {
            const res = await svc.app.inject({
              method: op.method as 'POST',
              url: fillPath(op.path),
              headers: auth,
              payload: { [name]: value },
            });
            expect(
              res.statusCode,
              `${op.method} ${op.path} ${name}=${JSON.stringify(value)?.slice(0, 80)}`,
            ).toBe(400);
            expect(res.json().error).toBe('validation_error');
          }),
          { numRuns: 15 },
        );
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(5);
    expect(await snapshot()).toBe(before);
  });

  /** The request's credentials by the route's audience. */
  const authFor = (path: string) =>
    path.startsWith('/api/v1/bot/') ? bot.auth : path.startsWith('/api/v1/owner/') ? owner.auth : {};

  /** A 4xx in the one envelope whose code is one of the service's, with that code's status. */
  function expectCodedRefusal(res: { statusCode: number; body: string }, what: string): void {
    expect(res.statusCode, `${what} → ${res.body.slice(0, 200)}`).toBeGreaterThanOrEqual(400);
    expect(res.statusCode, `${what} → ${res.body.slice(0, 200)}`).toBeLessThan(500);
    const body = JSON.parse(res.body) as { error?: string; message?: unknown };
    expect(body.error! in ERROR_STATUS, `${what}: code ${body.error}`).toBe(true);
    expect(ERROR_STATUS[body.error as ErrorCode], `${what}: ${body.error}`).toBe(res.statusCode);
  }

  let randomIp = 0;
  const nextRandomIp = () => `10.77.${(++randomIp >> 8) & 255}.${randomIp & 255}`;

  it('a NUL (with control characters, lone surrogates, great length) in every string field and query parameter: 4xx with the service code, nothing changes', async () => {
    const before = await snapshot();
    let fields = 0;
    for (const op of operations(svc)) {
      const props = Object.entries(op.body?.properties ?? {}).filter(
        ([, schema]) => isStringSchema(schema) || (schema.type === 'array' && isStringSchema(schema.items)),
      );
      for (const [name, schema] of props) {
        fields++;
        await fc.assert(
          fc.asyncProperty(nulString, async (value) => {
            const payload = { ...sampleBody(op.body), [name]: schema.type === 'array' ? [value] : value };
            const res = await svc.app.inject({
              method: op.method as 'POST',
              url: fillPath(op.path),
              headers: authFor(op.path),
              remoteAddress: nextRandomIp(),
              payload,
            });
            expectCodedRefusal(res, `${op.method} ${op.path} ${name}=${JSON.stringify(value).slice(0, 60)}`);
          }),
          { numRuns: 6 },
        );
      }
      for (const name of op.query) {
        fields++;
        await fc.assert(
          fc.asyncProperty(nulString, async (value) => {
            const url = `${fillPath(op.path)}?${new URLSearchParams({ [name]: value.slice(0, 4000) })}`;
            const res = await svc.app.inject({ method: op.method as 'GET', url, headers: authFor(op.path) });
            expectCodedRefusal(res, `${op.method} ${op.path}?${name}`);
          }),
          { numRuns: 4 },
        );
      }
    }
    expect(fields).toBeGreaterThan(20);
    expect(await snapshot()).toBe(before);
  });

  it('control characters, lone surrogates and very long strings without NUL: never a 5xx, refusals in the envelope', async () => {
    for (const op of operations(svc)) {
      const props = Object.entries(op.body?.properties ?? {}).filter(([, schema]) => isStringSchema(schema));
      for (const [name] of props) {
        await fc.assert(
          fc.asyncProperty(controlString, async (value) => {
            const res = await svc.app.inject({
              method: op.method as 'POST',
              url: fillPath(op.path),
              headers: authFor(op.path),
              remoteAddress: nextRandomIp(),
              payload: { ...sampleBody(op.body), [name]: value },
            });
            const what = `${op.method} ${op.path} ${name}=${JSON.stringify(value).slice(0, 60)}`;
            expect(res.statusCode, `${what} → ${res.body.slice(0, 200)}`).toBeLessThan(500);
            if (res.statusCode >= 400) expectCodedRefusal(res, what);
          }),
          { numRuns: 3 },
        );
      }
    }
  });

  it('oversized bodies are 413 and oversized headers are refused, on every route with a body', async () => {
    const before = await snapshot();
    for (const op of operations(svc)) {
      if (op.method === 'GET') continue;
      const res = await svc.app.inject({
        method: op.method as 'POST',
        url: fillPath(op.path),
        headers: { ...owner.auth, 'content-type': 'application/json' },
        payload: JSON.stringify({ pad: 'x'.repeat(1_100_000) }),
      });
      expect([401, 413], `${op.method} ${op.path}`).toContain(res.statusCode);
    }
    expect(await snapshot()).toBe(before);
  });

  it('malformed ids in paths are 400 or 404, never 500', async () => {
    for (const op of operations(svc)) {
      if (!op.path.includes('{')) continue;
      await fc.assert(
        fc.asyncProperty(hostileString, async (id) => {
          const url = op.path.replace(/\{(\w+)\}/g, () => encodeSegment(id.slice(0, 500)));
          const auth = op.path.startsWith('/api/v1/bot/') ? bot.auth : owner.auth;
          const res = await svc.app.inject({
            method: op.method as 'GET',
            url,
            headers: auth,
            ...(op.method === 'GET' ? {} : { payload: {} }),
          });
          expect(res.statusCode, `${op.method} ${url.slice(0, 120)}`).toBeLessThan(500);
          expect(res.statusCode).toBeGreaterThanOrEqual(400);
        }),
        { numRuns: 15 },
      );
    }
  });
});
