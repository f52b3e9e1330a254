import type { TestOwner, TestService } from '../support/service.ts';

export interface BotAuth {
  auth: Record<string, string>;
}

export function ask(svc: TestService, bot: BotAuth, body: unknown) {
  return svc.app.inject({
    method: 'POST',
    url: '/api/v1/bot/wallet/topup-requests',
    headers: bot.auth,
    payload: body as Record<string, unknown>,
  });
}

export function listForBot(svc: TestService, bot: BotAuth) {
  return svc.app.inject({ url: '/api/v1/bot/wallet/topup-requests', headers: bot.auth });
}

export function decide(
  svc: TestService,
  owner: Pick<TestOwner, 'auth'>,
  topupId: string,
  decision: 'approve' | 'decline',
  body?: Record<string, unknown>,
) {
  return svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/topup-requests/${topupId}/${decision}`,
    headers: owner.auth,
    ...(body ? { payload: body } : {}),
  });
}

export async function pendingTopups(svc: TestService, bot: BotAuth) {
  const check = await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth });
  const status = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
  return { check: check.json().pending_topups as number, status: status.json().pending_topups as number };
}
