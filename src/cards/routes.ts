import { type Static, Type } from '@sinclair/typebox';
import type { App } from '../app.ts';
import { OWNER_SECURITY } from '../owners/routes.ts';
import type { AppContext } from '../platform/context.ts';
import { ErrorBody, IdParam } from '../platform/schemas.ts';
import { activateCard, getCard, profilesFile, startCard, updateCard, updateProfile } from './service.ts';

const BotParams = Type.Object({ bot_id: IdParam('bot') });
const CardParams = Type.Object({ bot_id: IdParam('bot'), card_id: IdParam('card') });
const ProfileParams = Type.Object({
  bot_id: IdParam('bot'),
  card_id: IdParam('card'),
  profile_index: Type.String({ pattern: '^[1-6]$' }),
});
const Cents = (max: number) => Type.Integer({ minimum: 0, maximum: max });
const Loose = Type.Object({}, { additionalProperties: true });
const ApprovalMode = Type.Union([
  Type.Literal('ask_for_everything'),
  Type.Literal('auto_approve_under_threshold'),
  Type.Literal('auto_approve_by_category'),
]);

// Format 2 (src/cards/split.ts builds it where the owner types the number): per profile only the
// 3 digits at the missing positions and the Luhn residue of the profile's other digits.
const ActivateBody = Type.Object(
  {
    bin: Type.String({
      pattern: '^[0-9]{6}$',
      description: 'The first 6 digits (issuer prefix), shared by all profiles.',
    }),
    card_length: Type.Integer({ minimum: 12, maximum: 19 }),
    expiry_month: Type.String({ pattern: '^(0?[1-9]|1[0-2])$' }),
    expiry_year: Type.String({ pattern: '^20[0-9]{2}$' }),
    profiles: Type.Array(
      Type.Object(
        {
          profile_index: Type.Integer({ minimum: 1, maximum: 6 }),
          missing_digits: Type.String({ pattern: '^[0-9]{3}$' }),
          visible_luhn: Type.Integer({ minimum: 0, maximum: 9 }),
        },
        { additionalProperties: false },
      ),
      { minItems: 6, maxItems: 6 },
    ),
  },
  { additionalProperties: false },
);

const PatchBody = Type.Object(
  {
    per_transaction_cents: Type.Optional(Cents(100_000_000)),
    daily_cents: Type.Optional(Cents(100_000_000)),
    monthly_cents: Type.Optional(Cents(1_000_000_000)),
    approval_mode: Type.Optional(ApprovalMode),
    approval_threshold_cents: Type.Optional(Cents(100_000_000)),
    approved_categories: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 50 }),
    ),
    status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('frozen')])),
  },
  { additionalProperties: false, minProperties: 1 },
);

const ProfileBody = Type.Object(
  {
    allowance_cents: Type.Optional(Cents(1_000_000_000)),
    allowance_window: Type.Optional(
      Type.Union([Type.Literal('day'), Type.Literal('week'), Type.Literal('month')]),
    ),
    approval_rule: Type.Optional(
      Type.Union([
        Type.Literal('follow_card'),
        Type.Literal('ask_for_everything'),
        Type.Literal('auto_approve_under_threshold'),
      ]),
    ),
    approval_threshold_cents: Type.Optional(Cents(100_000_000)),
    enabled: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false, minProperties: 1 },
);

export async function registerCardRoutes(app: App, ctx: AppContext): Promise<void> {
  const tags = ['owner', 'cards'];
  const security = OWNER_SECURITY;

  app.post<{ Params: Static<typeof BotParams>; Body: { label?: string } }>(
    '/api/v1/owner/bots/:bot_id/cards',
    {
      schema: {
        tags,
        security,
        summary: 'Start a card: the service picks the real profile and the 3 missing digit positions',
        params: BotParams,
        body: Type.Optional(Type.Object({ label: Type.Optional(Type.String({ maxLength: 100 })) })),
        response: { 201: Loose, 404: ErrorBody },
      },
    },
    async (request, reply) =>
      reply
        .status(201)
        .send(await startCard(ctx, request.owner!.id, request.params.bot_id, request.body?.label)),
  );

  app.get<{ Params: Static<typeof CardParams> }>(
    '/api/v1/owner/bots/:bot_id/cards/:card_id',
    {
      schema: {
        tags,
        security,
        summary: 'One card with its guardrails and profiles',
        params: CardParams,
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) => getCard(ctx, request.owner!.id, request.params.bot_id, request.params.card_id),
  );

  app.post<{ Params: Static<typeof CardParams>; Body: Static<typeof ActivateBody> }>(
    '/api/v1/owner/bots/:bot_id/cards/:card_id/activate',
    {
      schema: {
        tags,
        security,
        summary:
          'Activate the card with the per-profile digits built by the card wizard or `botpay card split` (stored encrypted)',
        params: CardParams,
        body: ActivateBody,
        response: { 200: Loose, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) =>
      activateCard(ctx, request.owner!.id, request.params.bot_id, request.params.card_id, request.body),
  );

  app.get<{ Params: Static<typeof CardParams> }>(
    '/api/v1/owner/bots/:bot_id/cards/:card_id/profiles-file',
    {
      schema: {
        tags,
        security,
        summary: 'The payment profiles file of a card activated before format 2 (409 for newer cards)',
        params: CardParams,
        response: { 200: Loose, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request, reply) => {
      const file = await profilesFile(ctx, request.owner!.id, request.params.bot_id, request.params.card_id);
      reply.header('content-disposition', `attachment; filename="payment-profiles-${file.card_id}.json"`);
      reply.header('cache-control', 'no-store');
      return file;
    },
  );

  app.patch<{ Params: Static<typeof CardParams>; Body: Static<typeof PatchBody> }>(
    '/api/v1/owner/bots/:bot_id/cards/:card_id',
    {
      schema: {
        tags,
        security,
        summary: 'Update card guardrails, approval mode or status',
        params: CardParams,
        body: PatchBody,
        response: { 200: Loose, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) =>
      updateCard(ctx, request.owner!.id, request.params.bot_id, request.params.card_id, request.body),
  );

  app.put<{ Params: Static<typeof ProfileParams>; Body: Static<typeof ProfileBody> }>(
    '/api/v1/owner/bots/:bot_id/cards/:card_id/profiles/:profile_index',
    {
      schema: {
        tags,
        security,
        summary: 'Set a payment profile allowance and approval rule',
        params: ProfileParams,
        body: ProfileBody,
        response: { 200: Loose, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) =>
      updateProfile(
        ctx,
        request.owner!.id,
        request.params.bot_id,
        request.params.card_id,
        Number(request.params.profile_index),
        request.body,
      ),
  );
}
