import type { TestService } from '../support/service.ts';

// A tiny in-process "browser" for app.inject: keeps cookies, reads CSRF tokens out of pages and
// submits url-encoded forms, so the security tests exercise the same forms a person uses.

export interface Response {
  statusCode: number;
  body: string;
  headers: Record<string, unknown>;
  cookies: Array<{ name: string; value: string; [key: string]: unknown }>;
}

export class FormClient {
  readonly jar = new Map<string, string>();

  constructor(
    readonly svc: TestService,
    readonly ip = '10.9.0.1',
  ) {}

  cookieHeader(): string {
    return [...this.jar].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  private remember(res: Response) {
    for (const c of res.cookies) {
      if (c.value === '' || (typeof c.maxAge === 'number' && c.maxAge <= 0)) this.jar.delete(c.name);
      else this.jar.set(c.name, c.value);
    }
  }

  async get(url: string, headers: Record<string, string> = {}): Promise<Response> {
    const res = (await this.svc.app.inject({
      method: 'GET',
      url,
      remoteAddress: this.ip,
      headers: { accept: 'text/html', cookie: this.cookieHeader(), ...headers },
    })) as unknown as Response;
    this.remember(res);
    return res;
  }

  async post(
    url: string,
    form: Record<string, string>,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    const res = (await this.svc.app.inject({
      method: 'POST',
      url,
      remoteAddress: this.ip,
      headers: {
        accept: 'text/html',
        'content-type': 'application/x-www-form-urlencoded',
        cookie: this.cookieHeader(),
        ...headers,
      },
      payload: new URLSearchParams(form).toString(),
    })) as unknown as Response;
    this.remember(res);
    return res;
  }

  /** GETs the page and POSTs its form (the one whose action is `action`) with extra fields. */
  async submit(pageUrl: string, action: string, fields: Record<string, string> = {}): Promise<Response> {
    const page = await this.get(pageUrl);
    if (page.statusCode !== 200) throw new Error(`GET ${pageUrl} answered ${page.statusCode}`);
    return this.post(action, { _csrf: csrfIn(page.body, action), ...fields });
  }
}

/** The _csrf value of the form posting to `action` on the page. */
export function csrfIn(body: string, action?: string): string {
  const forms = body.split('<form').slice(1);
  for (const form of forms) {
    if (action && !form.includes(`action="${action}"`)) continue;
    const m = /name="_csrf" value="([^"]+)"/.exec(form);
    if (m) return m[1]!;
  }
  throw new Error(`no CSRF token for form ${action ?? ''}`);
}

/**
 * What a browser would send for the form posting to `action` as the page shows it: every named
 * input with its value and every select with its selected option (no button, no file).
 */
export function formFields(body: string, action: string): Record<string, string> {
  const start = body.indexOf(`action="${action}"`);
  if (start < 0) throw new Error(`no form ${action}`);
  const form = body.slice(start, body.indexOf('</form>', start));
  const decodeEntities = (v: string) =>
    v
      .replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'")
      .replace(/&lt;/g, '<')
      .replace(/&gt;/g, '>')
      .replace(/&amp;/g, '&');
  const fields: Record<string, string> = {};
  for (const m of form.matchAll(/<input\b[^>]*>/g)) {
    const name = /\bname="([^"]*)"/.exec(m[0])?.[1];
    if (!name || /type="(file|submit)"/.test(m[0])) continue;
    fields[name] = decodeEntities(/\bvalue="([^"]*)"/.exec(m[0])?.[1] ?? '');
  }
  for (const m of form.matchAll(/<select\b[^>]*\bname="([^"]*)"[^>]*>(.*?)<\/select>/gs)) {
    const options = [...m[2]!.matchAll(/<option\b[^>]*value="([^"]*)"([^>]*)>/g)];
    const chosen = options.find((o) => /\bselected\b/.test(o[2]!)) ?? options[0];
    fields[m[1]!] = decodeEntities(chosen?.[1] ?? '');
  }
  return fields;
}

export function magicLinkIn(text: string): string {
  const m = /(https?:\/\/\S+\/signin\/verify\?token=[0-9a-f]{64})/.exec(text);
  if (!m) throw new Error('no sign-in link in mail');
  return m[1]!;
}

/** Signs in through the real forms and the captured mail; returns the client with its session. */
export async function signIn(svc: TestService, email: string, ip?: string): Promise<FormClient> {
  const client = new FormClient(svc, ip);
  const sent = svc.mailer.sent.length;
  const res = await client.submit('/signin', '/signin', { email });
  if (res.statusCode !== 303) throw new Error(`sign-in request answered ${res.statusCode}: ${res.body}`);
  // The sign-in mail, not another mail to the same address the notification job sent meanwhile
  // (a top-up request, an approval).
  const mail = svc.mailer.sent
    .slice(sent)
    .find((m) => m.to === email && /\/signin\/verify\?token=/.test(m.text));
  if (!mail) throw new Error('no sign-in mail');
  const link = new URL(magicLinkIn(mail.text));
  const verify = await client.submit(`${link.pathname}${link.search}`, '/signin/verify', {
    token: link.searchParams.get('token')!,
  });
  if (verify.statusCode !== 303) throw new Error(`verify answered ${verify.statusCode}: ${verify.body}`);
  return client;
}
