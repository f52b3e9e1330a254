import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../support/service.ts';

describe('OpenAPI document and docs page', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('serves OpenAPI 3.1 with every bot route of the spec so far, with security on protected ones', async () => {
    const res = await svc.app.inject({ url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/api/v1/bots/register',
        '/api/v1/bot/status',
        '/api/v1/bot/wallet/check',
        '/api/v1/owner/claims',
      ]),
    );
    expect(doc.paths['/api/v1/bot/status'].get.security).toEqual([{ botKey: [] }]);
    expect(doc.paths['/api/v1/bots/register'].post.security).toBeUndefined();
    expect(
      doc.paths['/api/v1/bots/register'].post.requestBody.content['application/json'].schema.required,
    ).toEqual(['bot_name', 'owner_email']);
  });

  it('serves a human-readable docs page', async () => {
    const res = await svc.app.inject({ url: '/docs/' });
    expect([200, 302]).toContain(res.statusCode);
    const page = res.statusCode === 302 ? await svc.app.inject({ url: String(res.headers.location) }) : res;
    expect(page.body).toMatch(/swagger/i);
  });
});
