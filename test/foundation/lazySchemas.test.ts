import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileAllSchemas, routeTable } from '../../src/app.ts';
import { lazySchemas } from '../../src/platform/lazySchemas.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// Route schemas are compiled on a route's first request (src/platform/lazySchemas.ts), which took
// about half a second off every start. What must not change: validation and serialization answer as
// before from the first request on, and every schema still compiles (a broken one would otherwise
// surface only when its route is first used, as a 500).

describe('route schemas compiled on first use', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it("a route's first request is validated and serialized as before", async () => {
    const bad = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bots/register',
      payload: { bot_name: 42, owner_email: 'owner@example.com' },
    });
    expect(bad.statusCode, bad.body).toBe(400);
    expect(bad.json().error).toBe('validation_error');
    expect(bad.json().message).toMatch(/bot_name/);
    const ok = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bots/register',
      payload: { bot_name: 'first-use', owner_email: 'owner@example.com' },
    });
    expect(ok.statusCode, ok.body).toBe(201);
    expect(ok.json().api_key).toMatch(/\S/);
    // The query string's own validator coerces text to the declared integer, and refuses junk.
    const owner = await createOwner(svc);
    const { bot_id } = await activeBot(svc, owner, { fundCents: 500 });
    const url = `/api/v1/owner/bots/${bot_id}/transactions`;
    const junk = await svc.app.inject({ url: `${url}?limit=lots`, headers: owner.auth });
    expect(junk.statusCode, junk.body).toBe(400);
    expect(junk.json().error).toBe('validation_error');
    const page = await svc.app.inject({ url: `${url}?limit=1`, headers: owner.auth });
    expect(page.statusCode, page.body).toBe(200);
    expect(page.json().transactions).toHaveLength(1);
  });

  it('every schema of every route compiles, and none was compiled while the app got ready', async () => {
    const fresh = await createTestService();
    try {
      const withSchemas = routeTable(fresh.app).filter((r) => r.schema && Object.keys(r.schema).length > 0);
      expect(withSchemas.length).toBeGreaterThan(50);
      // Nothing was asked of the app yet: every route's validators and serializers are pending.
      const compiled = compileAllSchemas(fresh.app);
      expect(compiled).toBeGreaterThanOrEqual(withSchemas.length);
      expect(compileAllSchemas(fresh.app)).toBe(0);
      // Compiled ahead of their first request, they still answer.
      const res = await fresh.app.inject({ url: '/api/v1/bot/status' });
      expect(res.statusCode).toBe(401);
    } finally {
      await fresh.close();
    }
  });
});

describe('lazySchemas', () => {
  it('compiles once, on first call, and forwards what Fastify reads (errors, schemaEnv, data context)', () => {
    const calls: string[] = [];
    const lazy = lazySchemas();
    const factory = lazy.validators((..._args: never[]) => (route: { url: string }) => {
      calls.push(route.url);
      const fn = Object.assign(
        (data: unknown, cxt?: { parentData: Record<string, unknown>; parentDataProperty: string }) => {
          if (cxt) cxt.parentData[cxt.parentDataProperty] = 'replaced';
          fn.errors = data === 'bad' ? [{ message: 'bad' }] : null;
          return data !== 'bad';
        },
        { errors: null as unknown, schemaEnv: { root: true } },
      );
      return fn;
    });
    const compile = factory() as unknown as (route: { url: string }) => ((
      data: unknown,
      cxt?: unknown,
    ) => boolean) & {
      errors: unknown;
      schemaEnv: unknown;
    };
    const validate = compile({ url: '/a' });
    compile({ url: '/b' });
    expect(calls).toEqual([]);
    expect(validate('bad')).toBe(false);
    expect(validate.errors).toEqual([{ message: 'bad' }]);
    expect(validate.schemaEnv).toEqual({ root: true });
    const parent: Record<string, unknown> = { body: 'x' };
    expect(validate('x', { parentData: parent, parentDataProperty: 'body' })).toBe(true);
    expect(parent.body).toBe('replaced');
    expect(calls).toEqual(['/a']);
    expect(lazy.compileAll()).toBe(1);
    expect(calls).toEqual(['/a', '/b']);
  });

  it('compileAll throws what a broken schema throws', () => {
    const lazy = lazySchemas();
    const factory = lazy.serializers((..._args: never[]) => (_route: unknown) => {
      throw new Error('schema is broken');
    });
    (factory() as unknown as (route: unknown) => unknown)({ url: '/x' });
    expect(() => lazy.compileAll()).toThrow('schema is broken');
  });
});
