import { OWNER_SECURITY, type App } from '../platform/http.ts';
import type { AppContext } from '../platform/context.ts';
import { ownerOf } from '../owners/auth.ts';
import { ErrorBody } from '../platform/schemas.ts';
import { optionalDisplayText } from '../platform/text.ts';
import {
  ActivateBody,
  BotParams,
  CardParams,
  CardStarted,
  CardView,
  PatchBody,
  ProfileBody,
  ProfileParams,
  ProfilesFileView,
  ProfileUpdated,
  SameCardBody,
  StartBody,
} from './schemas.ts';
import {
  activateCard,
  getCard,
  makeSameCard,
  profilesFile,
  startCard,
  updateCard,
  updateProfile,
} from './service.ts';

export async function registerCardRoutes(app: App, ctx: AppContext): Promise<void> {
  const tags = ['owner', 'cards'];
  const security = OWNER_SECURITY;

  app.post(
    '/api/v1/owner/bots/:bot_id/cards',
    {
      schema: {
        tags,
        security,
        summary:
          'Start a card: the service picks the real profile and the 3 missing digit positions; with same_card_as, the card shares the six profiles of a card you already added',
        params: BotParams,
        body: StartBody,
        response: { 201: CardStarted, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request, reply) =>
      reply.status(201).send(
        await startCard(ctx, ownerOf(request).id, request.params.bot_id, {
          // A label is a display name: one plain, visible line (platform/text.ts).
          label: optionalDisplayText(request.body?.label, 'label', 100) ?? undefined,
          sameCardAs: request.body?.same_card_as,
        }),
      ),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/cards/:card_id',
    {
      schema: {
        tags,
        security,
        summary: 'One card with its guardrails and profiles',
        params: CardParams,
        response: { 200: CardView, 404: ErrorBody },
      },
    },
    async (request) => getCard(ctx, ownerOf(request).id, request.params.bot_id, request.params.card_id),
  );

  app.post(
    '/api/v1/owner/bots/:bot_id/cards/:card_id/activate',
    {
      schema: {
        tags,
        security,
        summary:
          'Activate the card with the per-profile digits built by the card wizard or `botpay card split` (stored encrypted)',
        params: CardParams,
        body: ActivateBody,
        response: { 200: CardView, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) =>
      activateCard(ctx, ownerOf(request).id, request.params.bot_id, request.params.card_id, request.body),
  );

  app.post(
    '/api/v1/owner/bots/:bot_id/cards/:card_id/same-card',
    {
      schema: {
        tags,
        security,
        summary:
          'A card waiting for activation takes the six profiles of a card you already added with the same number (active at once unless that card is a legacy one)',
        params: CardParams,
        body: SameCardBody,
        response: { 200: CardView, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) =>
      makeSameCard(
        ctx,
        ownerOf(request).id,
        request.params.bot_id,
        request.params.card_id,
        request.body.same_card_as,
      ),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/cards/:card_id/profiles-file',
    {
      schema: {
        tags,
        security,
        summary: 'The payment profiles file of a card activated before format 2 (409 for newer cards)',
        params: CardParams,
        response: { 200: ProfilesFileView, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request, reply) => {
      const file = await profilesFile(
        ctx,
        ownerOf(request).id,
        request.params.bot_id,
        request.params.card_id,
      );
      reply.header('content-disposition', `attachment; filename="payment-profiles-${file.card_id}.json"`);
      reply.header('cache-control', 'no-store');
      return file;
    },
  );

  app.patch(
    '/api/v1/owner/bots/:bot_id/cards/:card_id',
    {
      schema: {
        tags,
        security,
        summary: 'Update card guardrails, approval mode or status',
        params: CardParams,
        body: PatchBody,
        response: { 200: CardView, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) =>
      updateCard(ctx, ownerOf(request).id, request.params.bot_id, request.params.card_id, request.body),
  );

  app.put(
    '/api/v1/owner/bots/:bot_id/cards/:card_id/profiles/:profile_index',
    {
      schema: {
        tags,
        security,
        summary: 'Set a payment profile allowance and approval rule',
        params: ProfileParams,
        body: ProfileBody,
        response: { 200: ProfileUpdated, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) =>
      updateProfile(
        ctx,
        ownerOf(request).id,
        request.params.bot_id,
        request.params.card_id,
        Number(request.params.profile_index),
        request.body,
      ),
  );
}
