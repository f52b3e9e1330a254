import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { IdParam } from '../platform/schemas.ts';
import { decideTopup, listOwnerTopups, NOTE_MAX } from '../topups/service.ts';
import { html, type SafeHtml } from './html.ts';
import { csrfField, flash, pill, postButton, usd, when } from './layout.ts';

// Top-up requests in the approvals inbox: a section listing the open requests of all the owner's
// bots with Approve (funds the asked amount) and Decline (with an optional note for the bot), and
// the two form posts. Deciding calls decideTopup, which decides a request once.

type Inbox = (
  request: FastifyRequest,
  reply: FastifyReply,
  options?: { status?: number; top?: SafeHtml | string },
) => Promise<unknown>;

const TopupParams = Type.Object({ topup_id: IdParam('topup') });

/** The inbox section: open top-up requests, oldest first. */
export async function topupSection(ctx: AppContext, ownerId: string, csrf: string): Promise<SafeHtml> {
  const { topup_requests: open } = await listOwnerTopups(ctx, ownerId, { status: 'pending' });
  if (open.length === 0) {
    return html`<section class="card" aria-labelledby="topups-h"><h2 id="topups-h">Top-up requests</h2><p class="muted">No bot is asking you for funds.</p></section>`;
  }
  return html`<section aria-labelledby="topups-h" class="stack"><h2 id="topups-h">Top-up requests</h2>
<ul class="approval-list">${open.map(
    (t) => html`<li class="card approval stack" data-testid="topup" data-topup="${t.topup_id}">
  <div class="spread"><strong class="big">${usd(t.amount_usd)}</strong>${pill('pending', 'asks for funds')}</div>
  <div>“${t.reason}”</div>
  <div class="muted small">Bot <a href="/bots/${t.bot_id}">${t.bot_name}</a> · asked ${when(t.created_at)} · open until ${when(t.expires_at)}</div>
  <div class="row">${postButton(`/approvals/topups/${t.topup_id}/approve`, `Approve and add ${usd(t.amount_usd)}`, csrf)}
  <form method="post" action="/approvals/topups/${t.topup_id}/decline" class="inline-form">${csrfField(csrf)}<div class="field"><input type="text" name="note" maxlength="${NOTE_MAX}" placeholder="Note for the bot (optional)" aria-label="Note for the bot"></div><button type="submit" class="danger">Decline</button></form></div></li>`,
  )}</ul></section>`;
}

export function registerTopupPages(app: App, ctx: AppContext, inbox: Inbox): void {
  for (const decision of ['approve', 'decline'] as const) {
    app.post<{ Params: Static<typeof TopupParams>; Body: { note?: string } }>(
      `/approvals/topups/:topup_id/${decision}`,
      {
        schema: {
          tags: ['dashboard'],
          summary: decision === 'approve' ? 'Approve a top-up request' : 'Decline a top-up request',
          params: TopupParams,
          body: Type.Object({
            _csrf: Type.Optional(Type.String({ maxLength: 200 })),
            note: Type.Optional(Type.String({ maxLength: NOTE_MAX * 2 })),
          }),
        },
      },
      async (request, reply) => {
        const note = request.body.note?.trim() ? request.body.note : undefined;
        try {
          await decideTopup(
            ctx,
            request.dashboard!.ownerId,
            request.params.topup_id,
            decision === 'approve' ? { approve: true } : { approve: false, note },
          );
        } catch (err) {
          if (err instanceof ApiError && err.code === 'not_pending') {
            return inbox(request, reply, {
              status: 409,
              top: flash(
                'bad',
                `This top-up request was already ${String(err.details.status ?? 'decided')}, so nothing changed.`,
              ),
            });
          }
          throw err;
        }
        return reply.redirect(
          `/approvals?notice=${decision === 'approve' ? 'topup_approved' : 'topup_declined'}`,
          303,
        );
      },
    );
  }
}
