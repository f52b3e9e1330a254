import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { decideTopup } from '../topups/service.ts';
import type { Inbox } from './approvalPages.ts';
import { tags } from './forms.ts';
import { sessionOf } from './http.ts';
import { TopupDecisionBody, TopupParams } from './schemas.ts';
import { flash } from './views/layout.ts';

// Top-up requests in the approvals inbox (the section is drawn by src/dashboard/views/approvals.ts):
// the two form posts, Approve (funds the asked amount) and Decline (with an optional note for the
// bot). Deciding calls decideTopup, which decides a request once.

export function registerTopupPages(app: App, ctx: AppContext, inbox: Inbox): void {
  for (const decision of ['approve', 'decline'] as const) {
    app.post(
      `/approvals/topups/:topup_id/${decision}`,
      {
        schema: {
          tags,
          summary: decision === 'approve' ? 'Approve a top-up request' : 'Decline a top-up request',
          params: TopupParams,
          body: TopupDecisionBody,
        },
      },
      async (request, reply) => {
        const note = request.body.note?.trim() ? request.body.note : undefined;
        try {
          await decideTopup(
            ctx,
            sessionOf(request).ownerId,
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
