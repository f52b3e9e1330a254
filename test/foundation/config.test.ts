import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config.ts';

describe('configuration', () => {
  it('has the documented defaults', () => {
    const c = parseConfig({});
    expect(c).toMatchObject({
      port: 8080,
      host: '0.0.0.0',
      baseUrl: 'http://localhost:8080',
      dataDir: './data',
      databaseUrl: undefined,
      tunnelDomain: 'tunnel.localhost',
      trustProxy: false,
      registrationRateLimitPerHour: 3,
      checkoutRateLimitPerHour: 30,
      approvalWindowSeconds: 900,
      webhookTimeoutMs: 10_000,
      webhookRetryDelaysSeconds: [60, 300, 900, 3600, 21600],
      webhookSecretOverlapSeconds: 86_400,
      allowPrivateWebhookTargets: false,
      internalUrl: undefined,
      tunnelLeaseSeconds: 30,
      databasePoolSize: 20,
      databasePoolWaitMs: 2000,
      shedEventLoopDelayMs: 500,
    });
    expect(parseConfig({ DATABASE_POOL_SIZE: '50' }).databasePoolSize).toBe(50);
    expect(parseConfig({ INTERNAL_URL: 'http://app1:8080/' }).internalUrl).toBe('http://app1:8080');
    expect([...c.roles].sort()).toEqual(['api', 'scheduler', 'tunnel', 'worker']);
    expect(parseConfig({ PORT: '9000' }).baseUrl).toBe('http://localhost:9000');
  });

  it.each([
    ['PORT', { PORT: 'eighty' }],
    ['PORT', { PORT: '70000' }],
    ['BASE_URL', { BASE_URL: 'not a url' }],
    ['BASE_URL', { BASE_URL: 'ftp://x.example.com' }],
    ['DATABASE_URL', { DATABASE_URL: 'mysql://x', SECRET_KEY: 'k'.repeat(40) }],
    ['SECRET_KEY', { DATABASE_URL: 'postgres://localhost/x' }],
    ['SECRET_KEY', { SECRET_KEY: 'short' }],
    ['TRUST_PROXY', { TRUST_PROXY: 'maybe' }],
    ['ROLES', { ROLES: 'api,cook' }],
    ['WEBHOOK_RETRY_DELAYS', { WEBHOOK_RETRY_DELAYS: '60,five' }],
    ['APPROVAL_WINDOW_SECONDS', { APPROVAL_WINDOW_SECONDS: '0' }],
    ['WEBHOOK_SECRET_OVERLAP_SECONDS', { WEBHOOK_SECRET_OVERLAP_SECONDS: '-1' }],
    ['TUNNEL_DOMAIN', { TUNNEL_DOMAIN: 'bad domain!' }],
    ['INTERNAL_URL', { INTERNAL_URL: 'app1:8080' }],
    ['INTERNAL_URL', { INTERNAL_URL: 'ftp://app1' }],
    ['TUNNEL_LEASE_SECONDS', { TUNNEL_LEASE_SECONDS: '1' }],
    ['DATABASE_POOL_SIZE', { DATABASE_POOL_SIZE: '1' }],
    ['DATABASE_POOL_SIZE', { DATABASE_POOL_SIZE: 'many' }],
    ['DATABASE_POOL_WAIT_MS', { DATABASE_POOL_WAIT_MS: '5' }],
    ['SHED_EVENT_LOOP_DELAY_MS', { SHED_EVENT_LOOP_DELAY_MS: 'soon' }],
    ['SMTP_URL', { SMTP_URL: 'http://mail' }],
    ['ALLOW_PRIVATE_WEBHOOK_TARGETS', { ALLOW_PRIVATE_WEBHOOK_TARGETS: 'sure' }],
  ])('a wrong %s stops start-up with a message naming it', (variable, env) => {
    let error: unknown;
    try {
      parseConfig(env);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe(variable);
    expect((error as Error).message).toContain(variable);
  });

  it('parses roles subsets and booleans', () => {
    const c = parseConfig({ ROLES: 'api, worker', TRUST_PROXY: 'true', ALLOW_PRIVATE_WEBHOOK_TARGETS: '1' });
    expect([...c.roles]).toEqual(['api', 'worker']);
    expect(c.trustProxy).toBe(1);
    expect(c.allowPrivateWebhookTargets).toBe(true);
  });

  it('TRUST_PROXY: false, true (one hop), a hop count, or proxy addresses and CIDRs', () => {
    expect(parseConfig({ TRUST_PROXY: 'false' }).trustProxy).toBe(false);
    expect(parseConfig({}).trustProxy).toBe(false);
    expect(parseConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
    expect(parseConfig({ TRUST_PROXY: '10.0.0.0/8, 127.0.0.1' }).trustProxy).toEqual([
      '10.0.0.0/8',
      '127.0.0.1',
    ]);
    for (const bad of ['11', 'proxy.example', '10.0.0.0/99']) {
      expect(() => parseConfig({ TRUST_PROXY: bad }), bad).toThrow(/TRUST_PROXY/);
    }
  });

  it('every variable the configuration reads is in the configuration table of the README', () => {
    const source = readFileSync('src/config.ts', 'utf8');
    const variables = new Set([...source.matchAll(/\(env, '([A-Z][A-Z0-9_]+)'/g)].map((m) => m[1]!));
    expect(variables.size).toBeGreaterThan(20);
    const readme = readFileSync('README.md', 'utf8');
    const missing = [...variables].filter((v) => !new RegExp(`^\\|\\s*\`${v}\`\\s*\\|`, 'm').test(readme));
    expect(missing).toEqual([]);
  });
});
