import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forbiddenReason } from '../../src/webhooks/ssrf.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { deliveryOf, emit, Receiver } from './helpers.ts';

describe('SSRF guard with ALLOW_PRIVATE_WEBHOOK_TARGETS off', () => {
  let svc: TestService;
  let receiver: Receiver;
  let worker: DeliveryWorker;
  // DNS is the edge of the world: this resolver answers for made-up names, and hands everything
  // else (localhost) to the system resolver.
  const fakeDns: Record<string, Array<{ address: string; family: 4 | 6 }>> = {
    'metadata.attacker.test': [{ address: '169.254.169.254', family: 4 }],
    'mixed.attacker.test': [
      { address: '93.184.215.14', family: 4 },
      { address: '10.0.0.7', family: 4 },
    ],
    'mapped.attacker.test': [{ address: '::ffff:127.0.0.1', family: 6 }],
  };

  beforeAll(async () => {
    svc = await createTestService({
      env: { ALLOW_PRIVATE_WEBHOOK_TARGETS: 'false', WEBHOOK_TIMEOUT_MS: '2000' },
    });
    receiver = await new Receiver().start();
    const { systemResolver } = await import('../../src/webhooks/ssrf.ts');
    worker = new DeliveryWorker(svc.ctx, {
      resolver: async (host) => fakeDns[host] ?? systemResolver(host),
    });
  });
  afterAll(async () => {
    await worker.stop();
    await receiver.close();
    await svc.close();
  });

  const cases: Array<[string, () => string, RegExp]> = [
    ['127.0.0.1 (a live receiver)', () => receiver.url('/direct'), /127\.0\.0\.1 \(loopback\)/],
    ['10.0.0.0/8', () => 'http://10.1.2.3/hook', /10\.1\.2\.3 \(private\)/],
    ['169.254.169.254 (cloud metadata)', () => 'http://169.254.169.254/latest/meta-data', /link-local/],
    ['::1', () => `http://[::1]:${receiver.port}/v6`, /::1 \(loopback\)/],
    ['::ffff:127.0.0.1', () => `http://[::ffff:127.0.0.1]:${receiver.port}/mapped`, /IPv4-embedded loopback/],
    ['0.0.0.0', () => `http://0.0.0.0:${receiver.port}/zero`, /unspecified/],
    [
      'localhost (resolves to loopback)',
      () => `http://localhost:${receiver.port}/name`,
      /localhost resolves to a/,
    ],
    ['a name resolving to the metadata address', () => 'http://metadata.attacker.test/x', /link-local/],
    [
      'a name with one private address among public ones',
      () => 'http://mixed.attacker.test/x',
      /10\.0\.0\.7/,
    ],
    [
      'a name resolving to an IPv4-mapped loopback',
      () => `http://mapped.attacker.test:${receiver.port}/x`,
      /loopback/,
    ],
  ];

  for (const [name, url, message] of cases) {
    it(`refuses ${name}`, async () => {
      const owner = await createOwner(svc);
      // Registration refuses literal private addresses and localhost names now; the delivery-time
      // guard is what stands for a bot registered before, or while private targets were allowed,
      // and for names whose DNS answer changes: the URL is put in place behind registration's back.
      const bot = await activeBot(svc, owner, {
        body: { callback_url: 'https://registered.example.com/hook' },
      });
      await svc.ctx.db.query('UPDATE bots SET callback_url = $1 WHERE id = $2', [url(), bot.bot_id]);
      const before = receiver.requests.length;
      const { id } = await emit(svc, bot.bot_id);
      await worker.runOnce();
      const d = await deliveryOf(svc, id);
      expect(d.status).toBe('pending'); // a failure like any other: retried, then failed
      expect(d.error).toMatch(/^refused to connect to /);
      expect(d.error).toMatch(message);
      expect(receiver.requests.length).toBe(before); // nothing reached the receiver
    });
  }

  it('counts refusals in the metrics', async () => {
    const text = await svc.ctx.metrics.registry.getSingleMetricAsString(
      'botpay_webhook_delivery_attempts_total',
    );
    expect(text).toMatch(/result="refused"\} [1-9]/);
  });

  it('classifies addresses', () => {
    for (const ip of ['172.16.5.5', '192.168.0.1', 'fc00::1', 'fd00::2', 'fe80::1', '100.64.0.1', '::']) {
      expect(forbiddenReason(ip)).not.toBeNull();
    }
    for (const ip of ['93.184.215.14', '172.32.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8']) {
      expect(forbiddenReason(ip)).toBeNull();
    }
  });

  it('classifies IPv6 forms that carry an IPv4 address by that address', () => {
    const forbidden: Array<[string, RegExp]> = [
      ['::ffff:0:127.0.0.1', /IPv4-embedded loopback/], // IPv4-translated
      ['::ffff:0:10.0.0.1', /IPv4-embedded private/],
      ['2002:7f00:1::1', /6to4 loopback/], // 6to4 of 127.0.0.1
      ['2002:a9fe:a9fe::', /6to4 link-local/], // 169.254.169.254, the cloud metadata address
      ['2002:c0a8:101::5', /6to4 private/], // 192.168.1.1
      // Teredo: client 127.0.0.1 (inverted: 80ff:fffe) behind a public server 65.54.227.120.
      ['2001:0:4136:e378:8000:63bf:80ff:fffe', /Teredo loopback/],
      // Teredo with a private server address.
      ['2001:0:a00:1:8000:63bf:f7f7:f7f7', /Teredo private/],
    ];
    for (const [ip, reason] of forbidden) expect(forbiddenReason(ip), ip).toMatch(reason);
    // The same forms around public IPv4 addresses stay allowed.
    for (const ip of ['::ffff:0:8.8.8.8', '2002:808:808::1', '2001:0:4136:e378:8000:63bf:f7f7:f7f7']) {
      expect(forbiddenReason(ip), ip).toBeNull();
    }
  });
});
