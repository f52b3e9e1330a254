import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import { sha256Hex } from '../../src/platform/crypto.ts';
import { newId } from '../../src/platform/ids.ts';
import { csrfIn, type FormClient, signIn } from '../dashboard/browserless.ts';
import { isPostgres } from '../support/db.ts';
import { runCli } from '../support/process.ts';
import { createOwner, createTestService, type TestService } from '../support/service.ts';

// Owner API tokens managed by a signed-in owner: the settings page (post/redirect/get, shown once)
// and /api/v1/owner/tokens, against the real app and database. The hostile cases play another
// owner, a leaked token and a curious reader of the list.

describe('owner API tokens', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  async function api(method: string, url: string, headers: Record<string, string>, payload?: unknown) {
    return svc.app.inject({
      method: method as 'GET',
      url,
      headers,
      ...(payload === undefined ? {} : { payload: payload as object }),
    });
  }

  /** Creates a token through the settings page and returns [token, page that showed it]. */
  async function createInDashboard(client: FormClient, name: string): Promise<string> {
    const res = await client.submit('/settings', '/settings/tokens', { name });
    expect(res.statusCode).toBe(303);
    expect(res.headers.location).toBe('/settings');
    const shown = await client.get('/settings');
    expect(shown.statusCode).toBe(200);
    const m = /data-testid="new-token">(svc_owner_[0-9a-f]{48})</.exec(shown.body);
    expect(m, 'the new token is shown after the redirect').not.toBeNull();
    return m![1]!;
  }

  it('the settings page creates a token shown once; reloading neither shows it again nor creates another', async () => {
    const client = await signIn(svc, 'tokens-prg@example.com');
    const home = await client.get('/');
    expect(home.body).toContain('href="/settings"');
    const token = await createInDashboard(client, 'laptop');
    // The token works, and its hash is all that is stored.
    const me = await api('GET', '/api/v1/owner/tokens', { authorization: `Bearer ${token}` });
    expect(me.statusCode).toBe(200);
    const list = me.json().tokens as Array<Record<string, unknown>>;
    expect(list.map((t) => t.name)).toEqual(['laptop']);
    expect(list[0]).toMatchObject({ token_prefix: token.slice(0, 14), last_used_at: expect.any(String) });
    const [row] = await svc.ctx.db.query<{ token_hash: string }>(
      'SELECT token_hash FROM owner_tokens WHERE id = $1',
      [list[0]!.token_id],
    );
    expect(row?.token_hash).toBe(sha256Hex(token));
    // Reload: not shown again, and still one token.
    const again = await client.get('/settings');
    expect(again.body).not.toContain(token);
    expect(again.body).not.toContain('data-testid="new-token"');
    expect(again.body.match(/data-testid="token-row"/g)).toHaveLength(1);
    expect(again.body).toContain('laptop');
    // The list never carries the token itself: neither the page nor the API.
    expect(JSON.stringify(list)).not.toContain(token);
    // Audit rows for the account.
    const audit = await svc.ctx.db.query<{ action: string; details: Record<string, unknown> }>(
      `SELECT a.action, a.details FROM audit_log a JOIN owners o ON o.id = a.owner_id
        WHERE o.email_normalized = 'tokens-prg@example.com' AND a.action LIKE 'owner.token%'`,
    );
    expect(audit).toEqual([
      { action: 'owner.token_created', details: expect.objectContaining({ name: 'laptop' }) },
    ]);
    expect(JSON.stringify(audit)).not.toContain(token);
  });

  it('the one-time cookie is bound to the session that created the token', async () => {
    const alice = await signIn(svc, 'tokens-alice@example.com');
    const res = await alice.submit('/settings', '/settings/tokens', { name: 'ci' });
    expect(res.statusCode).toBe(303);
    const stolen = alice.jar.get('botpay_new_token');
    expect(stolen).toBeTruthy();
    // Readable to nobody: encrypted, not the token.
    expect(stolen).not.toMatch(/svc_owner_/);
    const mallory = await signIn(svc, 'tokens-mallory@example.com');
    mallory.jar.set('botpay_new_token', stolen!);
    const page = await mallory.get('/settings');
    expect(page.statusCode).toBe(200);
    expect(page.body).not.toContain('data-testid="new-token"');
  });

  it('bad names keep the typed value and create nothing', async () => {
    const client = await signIn(svc, 'tokens-bad@example.com');
    const blank = await client.submit('/settings', '/settings/tokens', { name: '   ' });
    expect(blank.statusCode).toBe(400);
    const long = await client.submit('/settings', '/settings/tokens', { name: 'x'.repeat(150) });
    expect(long.statusCode).toBe(400);
    expect(long.body).toContain('x'.repeat(100));
    const ctl = await client.submit('/settings', '/settings/tokens', { name: 'a\u0007b' });
    expect(ctl.statusCode).toBe(400);
    const [n] = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM owner_tokens t JOIN owners o ON o.id = t.owner_id WHERE o.email_normalized = 'tokens-bad@example.com'`,
    );
    expect(n?.n).toBe(0);
  });

  it('the owner API lists and revokes; a revoked token answers 401 at once', async () => {
    const owner = await createOwner(svc);
    const client = await signIn(svc, owner.email);
    const token = await createInDashboard(client, 'script');
    const auth = { authorization: `Bearer ${token}` };
    const list = (await api('GET', '/api/v1/owner/tokens', owner.auth)).json().tokens as Array<{
      token_id: string;
      name: string;
    }>;
    expect(list.map((t) => t.name).sort()).toEqual(['', 'script']);
    const id = list.find((t) => t.name === 'script')!.token_id;
    const revoked = await api('DELETE', `/api/v1/owner/tokens/${id}`, owner.auth);
    expect(revoked.statusCode).toBe(200);
    expect(revoked.json()).toMatchObject({ token_id: id, revoked_at: expect.any(String) });
    expect((await api('GET', '/api/v1/owner/bots', auth)).statusCode).toBe(401);
    // Revoking again: it is gone.
    expect((await api('DELETE', `/api/v1/owner/tokens/${id}`, owner.auth)).statusCode).toBe(404);
    const after = (await api('GET', '/api/v1/owner/tokens', owner.auth)).json().tokens as unknown[];
    expect(after).toHaveLength(1);
    const actions = await svc.ctx.db.query<{ action: string }>(
      `SELECT action FROM audit_log WHERE owner_id = $1 AND action LIKE 'owner.token%' ORDER BY id`,
      [owner.id],
    );
    expect(actions.map((a) => a.action)).toEqual(['owner.token_created', 'owner.token_revoked']);
  });

  it("another owner's token id is 404 (API and dashboard) and stays valid", async () => {
    const alice = await createOwner(svc);
    const bob = await createOwner(svc);
    const [aliceToken] = (await api('GET', '/api/v1/owner/tokens', alice.auth)).json().tokens as Array<{
      token_id: string;
    }>;
    const viaApi = await api('DELETE', `/api/v1/owner/tokens/${aliceToken!.token_id}`, bob.auth);
    expect(viaApi.statusCode).toBe(404);
    expect(viaApi.json().error).toBe('not_found');
    const bobClient = await signIn(svc, bob.email);
    const page = await bobClient.get('/settings');
    const viaPage = await bobClient.post(`/settings/tokens/${aliceToken!.token_id}/revoke`, {
      _csrf: csrfIn(page.body, '/settings/tokens'),
    });
    expect(viaPage.statusCode).toBe(404);
    expect((await api('GET', '/api/v1/owner/bots', alice.auth)).statusCode).toBe(200);
    // Bob's list shows only Bob's.
    const bobs = (await api('GET', '/api/v1/owner/tokens', bob.auth)).json().tokens as Array<{
      token_id: string;
    }>;
    expect(bobs.map((t) => t.token_id)).not.toContain(aliceToken!.token_id);
    // Malformed ids are a validation error, not a 500.
    expect((await api('DELETE', '/api/v1/owner/tokens/..%2F..', bob.auth)).statusCode).toBe(400);
  });

  it('a bearer token cannot mint tokens; a session with its CSRF token can, through the API', async () => {
    const owner = await createOwner(svc);
    const minted = await api('POST', '/api/v1/owner/tokens', owner.auth, { name: 'more' });
    expect(minted.statusCode).toBe(403);
    expect(minted.json().error).toBe('forbidden');
    const client = await signIn(svc, owner.email);
    const page = await client.get('/settings');
    const csrf = /name="csrf-token" content="([^"]+)"/.exec(page.body)![1]!;
    const cookie = client.cookieHeader();
    const noCsrf = await api('POST', '/api/v1/owner/tokens', { cookie }, { name: 'x' });
    expect(noCsrf.statusCode).toBe(403);
    const made = await api(
      'POST',
      '/api/v1/owner/tokens',
      { cookie, 'x-csrf-token': csrf },
      { name: 'from the page' },
    );
    expect(made.statusCode).toBe(201);
    expect(made.json()).toMatchObject({ name: 'from the page', token: expect.stringMatching(/^svc_owner_/) });
    expect(
      (await api('POST', '/api/v1/owner/tokens', { cookie, 'x-csrf-token': csrf }, { name: '' })).statusCode,
    ).toBe(400);
  });

  it('last_used_at is written at most once a minute', async () => {
    const owner = await createOwner(svc);
    const list = async () =>
      (
        (await api('GET', '/api/v1/owner/tokens', owner.auth)).json().tokens as Array<{
          last_used_at: string;
        }>
      )[0]!.last_used_at;
    const first = await list();
    expect(first).toBe(new Date(svc.clock.now()).toISOString());
    svc.clock.advance(30_000);
    expect(await list()).toBe(first);
    svc.clock.advance(31_000);
    expect(await list()).toBe(new Date(svc.clock.now()).toISOString());
  });

  it('at most 25 active tokens', async () => {
    const owner = await createOwner(svc);
    const client = await signIn(svc, owner.email);
    // The CLI-made one plus 24 more.
    await svc.ctx.db.transaction(async (tx) => {
      for (let i = 0; i < 24; i++) {
        await tx.query(
          `INSERT INTO owner_tokens (id, owner_id, token_hash, token_prefix, label, created_at)
           VALUES ($1, $2, $3, 'svc_owner_0000', 'bulk', now())`,
          [newId('otk'), owner.id, `h${owner.id}${i}`],
        );
      }
    });
    const res = await client.submit('/settings', '/settings/tokens', { name: 'one too many' });
    expect(res.statusCode).toBe(409);
    expect(res.body).toContain('Revoke one');
    expect(res.body).toContain('one too many');
  });

  // A fresh embedded database (initdb and every migration) in a child process: slow on a busy machine.
  it.runIf(!isPostgres)(
    'the CLI still makes the first token, named with --name, listed like the others',
    { timeout: 120_000 },
    async () => {
      const dataDir = await mkdtemp(join(tmpdir(), 'botpay-cli-token-'));
      try {
        const run = await runCli(
          ['owner', 'token', 'create', '--email', 'cli@example.com', '--name', 'build box'],
          {
            DATA_DIR: dataDir,
          },
        );
        expect(run.code).toBe(0);
        const token = run.stdout.trim();
        expect(token).toMatch(/^svc_owner_[0-9a-f]{48}$/);
        const db = await openDatabase(parseConfig({ DATA_DIR: dataDir }));
        try {
          const rows = await db.query<{ label: string; token_hash: string }>(
            'SELECT label, token_hash FROM owner_tokens',
          );
          expect(rows).toEqual([{ label: 'build box', token_hash: sha256Hex(token) }]);
        } finally {
          await db.close();
        }
      } finally {
        await rm(dataDir, { recursive: true, force: true });
      }
    },
  );
});
