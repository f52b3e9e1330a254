import { Type } from '@sinclair/typebox';
import { IdParam } from '../platform/schemas.ts';

// HTTP shapes of the x402 routes. Field-level rules that need a clear message of their own (network,
// asset, checksums, whole amounts of micro-USDC) are checked in src/x402/requirements.ts.

/** One entry of an x402 v2 402 response's `accepts` list; checked field by field in requirements.ts. */
const PaymentRequirementsSchema = Type.Object(
  {},
  {
    additionalProperties: true,
    description:
      'x402 v2 PaymentRequirements: scheme ("exact"), network (CAIP-2, e.g. eip155:8453), asset (USDC contract, EIP-55), ' +
      'amount (atomic units, a whole number of them: "1000" is $0.001), payTo (EIP-55), maxTimeoutSeconds, extra {name, version}.',
  },
);

export const PayBody = Type.Object(
  {
    resource_url: Type.String({ minLength: 1, maxLength: 2000 }),
    payment_requirements: Type.Union([
      Type.Array(PaymentRequirementsSchema, { minItems: 1, maxItems: 20 }),
      PaymentRequirementsSchema,
    ]),
    resource: Type.Optional(
      Type.Object(
        {
          url: Type.Optional(Type.String({ maxLength: 2000 })),
          description: Type.Optional(Type.String({ maxLength: 500 })),
          mimeType: Type.Optional(Type.String({ maxLength: 200 })),
        },
        { additionalProperties: false },
      ),
    ),
    description: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
);

export const PayHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
});

const Common = {
  payment_id: Type.String(),
  confirmation_id: Type.String(),
  amount_usd: Type.Number(),
  amount_atomic: Type.String(),
  network: Type.String(),
  asset: Type.String(),
  pay_to: Type.String(),
  resource_url: Type.String(),
  x402_version: Type.Union([Type.Literal(1), Type.Literal(2)], {
    description: "The seller's x402 version: 2, or 1 for a seller on x402 v1 (header X-PAYMENT).",
  }),
  message: Type.String(),
};

const HeaderName = Type.Union([Type.Literal('PAYMENT-SIGNATURE'), Type.Literal('X-PAYMENT')], {
  description:
    'The request header that carries the payment: PAYMENT-SIGNATURE (x402 v2) or X-PAYMENT (x402 v1).',
});

const Signed = {
  valid_before: Type.String({ description: 'When the signed authorisation stops being valid (ISO 8601).' }),
  payment_header_name: HeaderName,
  payment_header: Type.String({
    description: 'base64 of payment_payload: send it as the header named payment_header_name.',
  }),
  payment_payload: Type.Object(
    {},
    { additionalProperties: true, description: 'The x402 PaymentPayload (v2, or v1 for a v1 seller).' },
  ),
};

export const PayApproved = Type.Object({
  approved: Type.Literal(true),
  status: Type.Literal('approved'),
  ...Common,
  ...Signed,
});

export const PayPending = Type.Object({
  approved: Type.Literal(false),
  status: Type.Literal('pending_confirmation'),
  ...Common,
  expires_at: Type.String(),
});

export const PaymentPoll = Type.Object({
  payment_id: Type.String(),
  confirmation_id: Type.String(),
  status: Type.Union([
    Type.Literal('pending'),
    Type.Literal('approved'),
    Type.Literal('denied'),
    Type.Literal('expired'),
  ]),
  payment_status: Type.Union([
    Type.Literal('pending'),
    Type.Literal('authorized'),
    Type.Literal('settled'),
    Type.Literal('lapsed'),
    Type.Literal('denied'),
    Type.Literal('expired'),
    Type.Literal('refused'),
  ]),
  amount_usd: Type.Number(),
  amount_atomic: Type.String(),
  pay_to: Type.String(),
  resource_url: Type.String(),
  tx_hash: Type.Union([Type.String(), Type.Null()]),
  x402_version: Type.Union([Type.Literal(1), Type.Literal(2)]),
  message: Type.String(),
  refusal_reason: Type.Optional(Type.String()),
  expires_at: Type.Optional(Type.String()),
  valid_before: Type.Optional(Type.String()),
  payment_header_name: Type.Optional(HeaderName),
  payment_header: Type.Optional(Type.String()),
  payment_payload: Type.Optional(Type.Object({}, { additionalProperties: true })),
});

const Address = Type.String({ maxLength: 42 });
const Domain = Type.String({ minLength: 1, maxLength: 253 });
const Cents = Type.Integer({ minimum: 1, maximum: 10_000_000 });

export const OwnerSettingsBody = Type.Object(
  {
    per_transaction_cents: Type.Optional(Cents),
    daily_cents: Type.Optional(Cents),
    monthly_cents: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000_000 })),
    approval_mode: Type.Optional(
      Type.Union([Type.Literal('ask_for_everything'), Type.Literal('auto_approve_under_threshold')]),
    ),
    approval_threshold_cents: Type.Optional(Type.Integer({ minimum: 0, maximum: 10_000_000 })),
    allow_pay_to: Type.Optional(Type.Array(Address, { maxItems: 100 })),
    deny_pay_to: Type.Optional(Type.Array(Address, { maxItems: 100 })),
    allow_domains: Type.Optional(Type.Array(Domain, { maxItems: 100 })),
    deny_domains: Type.Optional(Type.Array(Domain, { maxItems: 100 })),
  },
  { additionalProperties: false },
);

export const PaymentParams = Type.Object({ payment_id: IdParam('chk') });
export const WalletQuery = Type.Object({ refresh: Type.Optional(Type.Boolean()) });
export const PaymentsQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200 })),
});

const Usd = Type.Number();
const Time = Type.String({ format: 'date-time' });
const Nullable = <T extends ReturnType<typeof Type.String | typeof Type.Number>>(t: T) =>
  Type.Union([t, Type.Null()]);

/** The partner wallet as its owner sees it (wallet.ts presentWallet; no key material). */
export const OwnerWallet = Type.Object({
  bot_id: Type.String(),
  status: Type.String({ description: 'The partner_wallet rail: active or inactive.' }),
  network: Type.String(),
  asset: Type.String(),
  address: Type.String(),
  key_source: Type.Union([Type.Literal('generated'), Type.Literal('imported')]),
  balance_usd: Nullable(Usd),
  balance_read_at: Nullable(Time),
  ledger: Type.Object({ available_usd: Usd, held_usd: Usd, authorized_usd: Usd }),
  limits: Type.Object({
    per_transaction_usd: Usd,
    daily_usd: Usd,
    monthly_usd: Usd,
    approval_mode: Type.Union([
      Type.Literal('ask_for_everything'),
      Type.Literal('auto_approve_under_threshold'),
    ]),
    approval_threshold_usd: Usd,
  }),
  lists: Type.Object({
    allow_pay_to: Type.Array(Type.String()),
    deny_pay_to: Type.Array(Type.String()),
    allow_domains: Type.Array(Type.String()),
    deny_domains: Type.Array(Type.String()),
  }),
});

/** x402 payments of a bot for its owner (service.ts presentPayment). */
export const OwnerPayments = Type.Object({
  bot_id: Type.String(),
  payments: Type.Array(
    Type.Object({
      payment_id: Type.String(),
      status: Type.Union([
        Type.Literal('pending'),
        Type.Literal('denied'),
        Type.Literal('expired'),
        Type.Literal('authorized'),
        Type.Literal('settled'),
        Type.Literal('lapsed'),
        Type.Literal('refused'),
      ]),
      amount_usd: Usd,
      amount_atomic: Type.String(),
      pay_to: Type.String(),
      resource_url: Type.String(),
      description: Nullable(Type.String()),
      network: Type.String(),
      x402_version: Type.Union([Type.Literal(1), Type.Literal(2)]),
      domain_check: Type.Union([Type.Literal('claimed'), Type.Literal('probed'), Type.Literal('connected')], {
        description:
          'How the resource domain was known: connected (the service made the request), probed (the service saw the named resource ask for this payment), claimed (named by the bot; no domain list applied).',
      }),
      refusal_reason: Nullable(Type.String()),
      tx_hash: Nullable(Type.String()),
      valid_before: Nullable(Time),
      created_at: Time,
      finished_at: Nullable(Time),
    }),
  ),
});

const PaymentStatusUnion = Type.Union([
  Type.Literal('pending'),
  Type.Literal('denied'),
  Type.Literal('expired'),
  Type.Literal('authorized'),
  Type.Literal('settled'),
  Type.Literal('lapsed'),
  Type.Literal('refused'),
]);

/** POST /api/v1/bot/x402/fetch: the resource request the service makes for the bot (src/x402/fetch.ts). */
export const FetchBody = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2000, description: 'The resource (absolute https URL).' }),
    method: Type.Optional(
      Type.Union(
        [
          Type.Literal('GET'),
          Type.Literal('POST'),
          Type.Literal('PUT'),
          Type.Literal('PATCH'),
          Type.Literal('DELETE'),
        ],
        { description: 'Default GET.' },
      ),
    ),
    headers: Type.Optional(
      Type.Record(Type.String({ maxLength: 100 }), Type.String({ maxLength: 8192 }), {
        maxProperties: 50,
        description:
          'Request headers for the resource (not Host, Content-Length, hop-by-hop or payment headers: the service sets those).',
      }),
    ),
    body: Type.Optional(Type.String({ maxLength: 524_288, description: 'Request body as text (UTF-8).' })),
    body_base64: Type.Optional(Type.String({ maxLength: 700_000, description: 'Request body as base64.' })),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    payment_id: Type.Optional(
      Type.String({
        ...IdParam('chk'),
        description:
          'A payment this endpoint held for the owner (202), once approved: sends the request with it.',
      }),
    ),
  },
  { additionalProperties: false },
);

export const FetchAnswer = Type.Object({
  paid: Type.Boolean({ description: 'True when the seller took the payment this request made.' }),
  payment: Type.Union([
    Type.Object({
      payment_id: Type.String(),
      payment_status: PaymentStatusUnion,
      amount_usd: Usd,
      amount_atomic: Type.String(),
      pay_to: Type.String(),
      network: Type.String(),
      x402_version: Type.Union([Type.Literal(1), Type.Literal(2)]),
      tx_hash: Nullable(Type.String()),
      refusal_reason: Nullable(Type.String()),
      valid_before: Nullable(Time),
    }),
    Type.Null(),
  ]),
  response: Type.Object({
    status: Type.Integer({ description: "The resource's HTTP status." }),
    headers: Type.Record(Type.String(), Type.String(), { description: 'Its headers (names in lower case).' }),
    body_text: Type.Optional(Type.String({ description: 'The body, when it is text.' })),
    body_base64: Type.Optional(Type.String({ description: 'The body as base64, when it is not text.' })),
    truncated: Type.Boolean({ description: 'True when the body was longer than 1 MiB and was cut.' }),
  }),
  message: Type.String(),
});

export const RefusalBody = Type.Object(
  {
    reason: Type.Optional(Type.String({ maxLength: 200, description: "The seller's reason, as it said." })),
    seller_status: Type.Optional(Type.Integer({ minimum: 100, maximum: 599 })),
  },
  { additionalProperties: false },
);

export const RefusalAnswer = Type.Object({
  ...PaymentPoll.properties,
  released: Type.Boolean({
    description:
      'True when the authorisation can never be used (the facilitator verification found why) and its amount is back.',
  }),
});
