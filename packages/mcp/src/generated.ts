// Generated from the service OpenAPI document by packages/mcp/scripts/generate-schemas.ts.
// Do not edit: run `npm run generate -w packages/mcp` after changing a bot route schema.
// test/generated.test.ts fails when this file and the routes disagree.

/** A JSON Schema object, as it travels in tools/list. */
export type JsonSchema = { [key: string]: unknown };

/** Every bot operation behind the API key, as "METHOD /path". */
export type OperationKey =
  | 'GET /api/v1/bot/merchant/checkout/status'
  | 'GET /api/v1/bot/messages'
  | 'GET /api/v1/bot/status'
  | 'GET /api/v1/bot/wallet/check'
  | 'GET /api/v1/bot/wallet/topup-requests'
  | 'GET /api/v1/bot/x402/payments/{payment_id}'
  | 'POST /api/v1/bot/merchant/checkout'
  | 'POST /api/v1/bot/messages/ack'
  | 'POST /api/v1/bot/tasks/next'
  | 'POST /api/v1/bot/wallet/topup-requests'
  | 'POST /api/v1/bot/x402/fetch'
  | 'POST /api/v1/bot/x402/pay'
  | 'POST /api/v1/bot/x402/payments/{payment_id}/refusal';

/** Input (body, or query and path parameters) and success output of every bot operation, as JSON Schema. */
export const OPERATIONS: Record<OperationKey, { input: JsonSchema; output: JsonSchema }> = {
  'GET /api/v1/bot/merchant/checkout/status': {
    input: {
      type: 'object',
      properties: {
        confirmation_id: {
          minLength: 1,
          maxLength: 100,
          type: 'string',
        },
      },
      required: ['confirmation_id'],
    },
    output: {
      type: 'object',
      required: ['confirmation_id', 'status', 'amount_usd', 'merchant_name', 'item_name', 'message'],
      properties: {
        confirmation_id: {
          type: 'string',
        },
        status: {
          anyOf: [
            {
              type: 'string',
              enum: ['pending'],
            },
            {
              type: 'string',
              enum: ['approved'],
            },
            {
              type: 'string',
              enum: ['denied'],
            },
            {
              type: 'string',
              enum: ['expired'],
            },
          ],
        },
        amount_usd: {
          type: 'number',
        },
        merchant_name: {
          type: 'string',
        },
        item_name: {
          type: 'string',
        },
        message: {
          type: 'string',
        },
        missing_digits: {
          type: 'string',
        },
        expiry_month: {
          type: 'string',
        },
        expiry_year: {
          type: 'string',
        },
        expires_at: {
          type: 'string',
        },
      },
    },
  },
  'GET /api/v1/bot/messages': {
    input: {
      type: 'object',
      properties: {
        limit: {
          minimum: 1,
          maximum: 200,
          type: 'integer',
          description: '1 to 200 (default 50).',
        },
      },
    },
    output: {
      type: 'object',
      required: ['messages', 'has_more'],
      properties: {
        messages: {
          type: 'array',
          items: {
            type: 'object',
            required: ['id', 'event', 'timestamp', 'bot_id', 'data'],
            properties: {
              id: {
                type: 'string',
              },
              event: {
                type: 'string',
              },
              timestamp: {
                type: 'string',
              },
              bot_id: {
                type: 'string',
              },
              data: {
                additionalProperties: true,
                type: 'object',
                properties: {},
              },
            },
          },
        },
        has_more: {
          type: 'boolean',
        },
      },
    },
  },
  'GET /api/v1/bot/status': {
    input: {
      type: 'object',
      properties: {},
    },
    output: {
      type: 'object',
      required: ['bot_id', 'bot_name', 'status', 'default_rail', 'rails', 'master_guardrails'],
      properties: {
        bot_id: {
          type: 'string',
        },
        bot_name: {
          type: 'string',
        },
        status: {
          anyOf: [
            {
              type: 'string',
              enum: ['active'],
            },
            {
              type: 'string',
              enum: ['pending'],
            },
            {
              type: 'string',
              enum: ['frozen'],
            },
            {
              type: 'string',
              enum: ['inactive'],
            },
          ],
        },
        default_rail: {
          anyOf: [
            {
              type: 'string',
            },
            {
              type: 'null',
            },
          ],
        },
        active_rails: {
          type: 'array',
          items: {
            type: 'string',
          },
        },
        rails: {
          type: 'object',
          additionalProperties: {
            additionalProperties: true,
            type: 'object',
            required: ['status', 'balance_usd'],
            properties: {
              status: {
                type: 'string',
              },
              balance_usd: {
                type: 'number',
              },
              spending_limits: {
                type: 'object',
                required: [
                  'per_transaction_usd',
                  'monthly_usd',
                  'monthly_spent_usd',
                  'monthly_remaining_usd',
                ],
                properties: {
                  per_transaction_usd: {
                    type: 'number',
                  },
                  monthly_usd: {
                    type: 'number',
                  },
                  monthly_spent_usd: {
                    type: 'number',
                  },
                  monthly_remaining_usd: {
                    type: 'number',
                  },
                },
              },
              address: {
                type: 'string',
              },
              balance_read_at: {
                anyOf: [
                  {
                    type: 'string',
                  },
                  {
                    type: 'null',
                  },
                ],
              },
              network: {
                type: 'string',
              },
            },
          },
        },
        master_guardrails: {
          anyOf: [
            {
              type: 'object',
              required: ['per_transaction_usd', 'daily_budget_usd', 'monthly_budget_usd'],
              properties: {
                per_transaction_usd: {
                  type: 'number',
                },
                daily_budget_usd: {
                  type: 'number',
                },
                monthly_budget_usd: {
                  type: 'number',
                },
              },
            },
            {
              type: 'null',
            },
          ],
        },
        message: {
          type: 'string',
        },
        pending_messages: {
          type: 'integer',
        },
        pending_topups: {
          type: 'integer',
        },
        webhook_status: {
          type: 'string',
        },
        webhook_fail_count: {
          type: 'integer',
        },
      },
    },
  },
  'GET /api/v1/bot/wallet/check': {
    input: {
      type: 'object',
      properties: {},
    },
    output: {
      type: 'object',
      required: ['wallet_status', 'balance_usd', 'card_status', 'spending_limits', 'pending_topups'],
      properties: {
        wallet_status: {
          type: 'string',
        },
        balance_usd: {
          type: 'number',
        },
        card_status: {
          type: 'string',
        },
        spending_limits: {
          type: 'object',
          required: ['per_transaction_usd', 'monthly_usd', 'monthly_spent_usd', 'monthly_remaining_usd'],
          properties: {
            per_transaction_usd: {
              type: 'number',
            },
            monthly_usd: {
              type: 'number',
            },
            monthly_spent_usd: {
              type: 'number',
            },
            monthly_remaining_usd: {
              type: 'number',
            },
          },
        },
        pending_topups: {
          type: 'integer',
        },
      },
    },
  },
  'GET /api/v1/bot/wallet/topup-requests': {
    input: {
      type: 'object',
      properties: {
        limit: {
          minimum: 1,
          maximum: 200,
          type: 'integer',
          description: '1 to 200 (default 50).',
        },
        before: {
          format: 'date-time',
          maxLength: 40,
          type: 'string',
          description: 'Only requests made before this time (the created_at of the last one you have).',
        },
      },
    },
    output: {
      type: 'object',
      required: ['topup_requests'],
      properties: {
        topup_requests: {
          type: 'array',
          items: {
            type: 'object',
            required: [
              'topup_id',
              'status',
              'amount_usd',
              'reason',
              'created_at',
              'expires_at',
              'decided_at',
            ],
            properties: {
              topup_id: {
                type: 'string',
              },
              status: {
                anyOf: [
                  {
                    type: 'string',
                    enum: ['pending'],
                  },
                  {
                    type: 'string',
                    enum: ['approved'],
                  },
                  {
                    type: 'string',
                    enum: ['declined'],
                  },
                  {
                    type: 'string',
                    enum: ['expired'],
                  },
                ],
              },
              amount_usd: {
                type: 'number',
              },
              reason: {
                type: 'string',
              },
              approved_amount_usd: {
                type: 'number',
              },
              note: {
                type: 'string',
              },
              created_at: {
                type: 'string',
              },
              expires_at: {
                type: 'string',
              },
              decided_at: {
                anyOf: [
                  {
                    type: 'string',
                  },
                  {
                    type: 'null',
                  },
                ],
              },
            },
          },
        },
      },
    },
  },
  'GET /api/v1/bot/x402/payments/{payment_id}': {
    input: {
      type: 'object',
      properties: {
        payment_id: {
          pattern: '^chk_[a-z2-7]{1,64}$',
          maxLength: 80,
          type: 'string',
        },
      },
      required: ['payment_id'],
    },
    output: {
      type: 'object',
      required: [
        'payment_id',
        'confirmation_id',
        'status',
        'payment_status',
        'amount_usd',
        'amount_atomic',
        'pay_to',
        'resource_url',
        'tx_hash',
        'x402_version',
        'message',
      ],
      properties: {
        payment_id: {
          type: 'string',
        },
        confirmation_id: {
          type: 'string',
        },
        status: {
          anyOf: [
            {
              type: 'string',
              enum: ['pending'],
            },
            {
              type: 'string',
              enum: ['approved'],
            },
            {
              type: 'string',
              enum: ['denied'],
            },
            {
              type: 'string',
              enum: ['expired'],
            },
          ],
        },
        payment_status: {
          anyOf: [
            {
              type: 'string',
              enum: ['pending'],
            },
            {
              type: 'string',
              enum: ['authorized'],
            },
            {
              type: 'string',
              enum: ['settled'],
            },
            {
              type: 'string',
              enum: ['lapsed'],
            },
            {
              type: 'string',
              enum: ['denied'],
            },
            {
              type: 'string',
              enum: ['expired'],
            },
            {
              type: 'string',
              enum: ['refused'],
            },
          ],
        },
        amount_usd: {
          type: 'number',
        },
        amount_atomic: {
          type: 'string',
        },
        pay_to: {
          type: 'string',
        },
        resource_url: {
          type: 'string',
        },
        tx_hash: {
          anyOf: [
            {
              type: 'string',
            },
            {
              type: 'null',
            },
          ],
        },
        x402_version: {
          anyOf: [
            {
              type: 'number',
              enum: [1],
            },
            {
              type: 'number',
              enum: [2],
            },
          ],
        },
        message: {
          type: 'string',
        },
        refusal_reason: {
          type: 'string',
        },
        expires_at: {
          type: 'string',
        },
        valid_before: {
          type: 'string',
        },
        payment_header_name: {
          description:
            'The request header that carries the payment: PAYMENT-SIGNATURE (x402 v2) or X-PAYMENT (x402 v1).',
          anyOf: [
            {
              type: 'string',
              enum: ['PAYMENT-SIGNATURE'],
            },
            {
              type: 'string',
              enum: ['X-PAYMENT'],
            },
          ],
        },
        payment_header: {
          type: 'string',
        },
        payment_payload: {
          additionalProperties: true,
          type: 'object',
          properties: {},
        },
      },
    },
  },
  'POST /api/v1/bot/merchant/checkout': {
    input: {
      additionalProperties: false,
      type: 'object',
      required: ['profile_index', 'merchant_name', 'merchant_url', 'item_name', 'amount_cents'],
      properties: {
        profile_index: {
          minimum: -2147483648,
          maximum: 2147483647,
          type: 'integer',
        },
        merchant_name: {
          minLength: 1,
          maxLength: 200,
          type: 'string',
        },
        merchant_url: {
          minLength: 1,
          maxLength: 2000,
          type: 'string',
        },
        item_name: {
          minLength: 1,
          maxLength: 500,
          type: 'string',
        },
        amount_cents: {
          minimum: 1,
          maximum: 10000000,
          type: 'integer',
        },
        category: {
          maxLength: 100,
          type: 'string',
        },
        task_id: {
          minLength: 1,
          maxLength: 100,
          type: 'string',
        },
        card_id: {
          minLength: 1,
          maxLength: 100,
          type: 'string',
        },
      },
    },
    output: {
      type: 'object',
      anyOf: [
        {
          type: 'object',
          required: [
            'approved',
            'missing_digits',
            'expiry_month',
            'expiry_year',
            'confirmation_id',
            'profile_index',
            'merchant_name',
            'amount_usd',
            'message',
          ],
          properties: {
            approved: {
              type: 'boolean',
              enum: [true],
            },
            missing_digits: {
              type: 'string',
            },
            expiry_month: {
              type: 'string',
            },
            expiry_year: {
              type: 'string',
            },
            confirmation_id: {
              type: 'string',
            },
            profile_index: {
              type: 'integer',
            },
            merchant_name: {
              type: 'string',
            },
            amount_usd: {
              type: 'number',
            },
            message: {
              type: 'string',
            },
          },
        },
        {
          type: 'object',
          required: [
            'approved',
            'status',
            'confirmation_id',
            'profile_index',
            'merchant_name',
            'amount_usd',
            'expires_at',
            'message',
          ],
          properties: {
            approved: {
              type: 'boolean',
              enum: [false],
            },
            status: {
              type: 'string',
              enum: ['pending_confirmation'],
            },
            confirmation_id: {
              type: 'string',
            },
            profile_index: {
              type: 'integer',
            },
            merchant_name: {
              type: 'string',
            },
            amount_usd: {
              type: 'number',
            },
            expires_at: {
              type: 'string',
            },
            message: {
              type: 'string',
            },
          },
        },
      ],
    },
  },
  'POST /api/v1/bot/messages/ack': {
    input: {
      type: 'object',
      required: ['event_ids'],
      properties: {
        event_ids: {
          minItems: 1,
          maxItems: 200,
          type: 'array',
          items: {
            pattern: '^evt_[a-z2-7]{1,64}$',
            maxLength: 80,
            type: 'string',
          },
        },
      },
      additionalProperties: false,
    },
    output: {
      type: 'object',
      required: ['acknowledged', 'not_found'],
      properties: {
        acknowledged: {
          type: 'array',
          items: {
            type: 'string',
          },
        },
        not_found: {
          type: 'array',
          items: {
            type: 'string',
          },
        },
      },
    },
  },
  'POST /api/v1/bot/tasks/next': {
    input: {
      type: 'object',
      properties: {},
    },
    output: {
      type: 'object',
      required: ['has_task', 'message'],
      properties: {
        has_task: {
          type: 'boolean',
        },
        task_type: {
          type: 'string',
          enum: ['purchase'],
        },
        task_id: {
          type: 'string',
        },
        instructions: {
          type: 'object',
          required: [
            'profile_index',
            'merchant_name',
            'merchant_url',
            'item_name',
            'amount_cents',
            'category',
          ],
          properties: {
            profile_index: {
              type: 'integer',
            },
            merchant_name: {
              type: 'string',
            },
            merchant_url: {
              type: 'string',
            },
            item_name: {
              type: 'string',
            },
            amount_cents: {
              type: 'integer',
            },
            category: {
              type: 'string',
            },
            card_id: {
              type: 'string',
            },
          },
        },
        message: {
          type: 'string',
        },
      },
    },
  },
  'POST /api/v1/bot/wallet/topup-requests': {
    input: {
      additionalProperties: false,
      type: 'object',
      required: ['amount_cents', 'reason'],
      properties: {
        amount_cents: {
          minimum: 1,
          maximum: 1000000,
          description: 'Amount asked for, in cents.',
          type: 'integer',
        },
        reason: {
          minLength: 1,
          maxLength: 1000,
          description: 'Why the bot needs the funds, shown to the owner (at most 500 characters).',
          type: 'string',
        },
      },
    },
    output: {
      type: 'object',
      anyOf: [
        {
          type: 'object',
          required: [
            'topup_id',
            'status',
            'amount_usd',
            'reason',
            'created_at',
            'expires_at',
            'decided_at',
            'message',
          ],
          properties: {
            topup_id: {
              type: 'string',
            },
            status: {
              anyOf: [
                {
                  type: 'string',
                  enum: ['pending'],
                },
                {
                  type: 'string',
                  enum: ['approved'],
                },
                {
                  type: 'string',
                  enum: ['declined'],
                },
                {
                  type: 'string',
                  enum: ['expired'],
                },
              ],
            },
            amount_usd: {
              type: 'number',
            },
            reason: {
              type: 'string',
            },
            approved_amount_usd: {
              type: 'number',
            },
            note: {
              type: 'string',
            },
            created_at: {
              type: 'string',
            },
            expires_at: {
              type: 'string',
            },
            decided_at: {
              anyOf: [
                {
                  type: 'string',
                },
                {
                  type: 'null',
                },
              ],
            },
            message: {
              type: 'string',
            },
          },
        },
        {
          type: 'object',
          required: [
            'topup_id',
            'status',
            'amount_usd',
            'reason',
            'created_at',
            'expires_at',
            'decided_at',
            'message',
          ],
          properties: {
            topup_id: {
              type: 'string',
            },
            status: {
              anyOf: [
                {
                  type: 'string',
                  enum: ['pending'],
                },
                {
                  type: 'string',
                  enum: ['approved'],
                },
                {
                  type: 'string',
                  enum: ['declined'],
                },
                {
                  type: 'string',
                  enum: ['expired'],
                },
              ],
            },
            amount_usd: {
              type: 'number',
            },
            reason: {
              type: 'string',
            },
            approved_amount_usd: {
              type: 'number',
            },
            note: {
              type: 'string',
            },
            created_at: {
              type: 'string',
            },
            expires_at: {
              type: 'string',
            },
            decided_at: {
              anyOf: [
                {
                  type: 'string',
                },
                {
                  type: 'null',
                },
              ],
            },
            message: {
              type: 'string',
            },
          },
        },
      ],
    },
  },
  'POST /api/v1/bot/x402/fetch': {
    input: {
      additionalProperties: false,
      type: 'object',
      required: ['url'],
      properties: {
        url: {
          minLength: 1,
          maxLength: 2000,
          description: 'The resource (absolute https URL).',
          type: 'string',
        },
        method: {
          description: 'Default GET.',
          anyOf: [
            {
              type: 'string',
              enum: ['GET'],
            },
            {
              type: 'string',
              enum: ['POST'],
            },
            {
              type: 'string',
              enum: ['PUT'],
            },
            {
              type: 'string',
              enum: ['PATCH'],
            },
            {
              type: 'string',
              enum: ['DELETE'],
            },
          ],
        },
        headers: {
          maxProperties: 50,
          description:
            'Request headers for the resource (not Host, Content-Length, hop-by-hop or payment headers: the service sets those).',
          type: 'object',
          additionalProperties: {
            maxLength: 8192,
            type: 'string',
          },
        },
        body: {
          maxLength: 524288,
          description: 'Request body as text (UTF-8).',
          type: 'string',
        },
        body_base64: {
          maxLength: 700000,
          description: 'Request body as base64.',
          type: 'string',
        },
        description: {
          maxLength: 500,
          type: 'string',
        },
        payment_id: {
          pattern: '^chk_[a-z2-7]{1,64}$',
          maxLength: 80,
          type: 'string',
          description:
            'A payment this endpoint held for the owner (202), once approved: sends the request with it.',
        },
      },
    },
    output: {
      type: 'object',
      anyOf: [
        {
          type: 'object',
          required: ['paid', 'payment', 'response', 'message'],
          properties: {
            paid: {
              description: 'True when the seller took the payment this request made.',
              type: 'boolean',
            },
            payment: {
              anyOf: [
                {
                  type: 'object',
                  required: [
                    'payment_id',
                    'payment_status',
                    'amount_usd',
                    'amount_atomic',
                    'pay_to',
                    'network',
                    'x402_version',
                    'tx_hash',
                    'refusal_reason',
                    'valid_before',
                  ],
                  properties: {
                    payment_id: {
                      type: 'string',
                    },
                    payment_status: {
                      anyOf: [
                        {
                          type: 'string',
                          enum: ['pending'],
                        },
                        {
                          type: 'string',
                          enum: ['denied'],
                        },
                        {
                          type: 'string',
                          enum: ['expired'],
                        },
                        {
                          type: 'string',
                          enum: ['authorized'],
                        },
                        {
                          type: 'string',
                          enum: ['settled'],
                        },
                        {
                          type: 'string',
                          enum: ['lapsed'],
                        },
                        {
                          type: 'string',
                          enum: ['refused'],
                        },
                      ],
                    },
                    amount_usd: {
                      type: 'number',
                    },
                    amount_atomic: {
                      type: 'string',
                    },
                    pay_to: {
                      type: 'string',
                    },
                    network: {
                      type: 'string',
                    },
                    x402_version: {
                      anyOf: [
                        {
                          type: 'number',
                          enum: [1],
                        },
                        {
                          type: 'number',
                          enum: [2],
                        },
                      ],
                    },
                    tx_hash: {
                      anyOf: [
                        {
                          type: 'string',
                        },
                        {
                          type: 'null',
                        },
                      ],
                    },
                    refusal_reason: {
                      anyOf: [
                        {
                          type: 'string',
                        },
                        {
                          type: 'null',
                        },
                      ],
                    },
                    valid_before: {
                      anyOf: [
                        {
                          format: 'date-time',
                          type: 'string',
                        },
                        {
                          type: 'null',
                        },
                      ],
                    },
                  },
                },
                {
                  type: 'null',
                },
              ],
            },
            response: {
              type: 'object',
              required: ['status', 'headers', 'truncated'],
              properties: {
                status: {
                  description: "The resource's HTTP status.",
                  type: 'integer',
                },
                headers: {
                  description: 'Its headers (names in lower case).',
                  type: 'object',
                  additionalProperties: {
                    type: 'string',
                  },
                },
                body_text: {
                  description: 'The body, when it is text.',
                  type: 'string',
                },
                body_base64: {
                  description: 'The body as base64, when it is not text.',
                  type: 'string',
                },
                truncated: {
                  description: 'True when the body was longer than 1 MiB and was cut.',
                  type: 'boolean',
                },
              },
            },
            message: {
              type: 'string',
            },
          },
        },
        {
          type: 'object',
          required: [
            'approved',
            'status',
            'payment_id',
            'confirmation_id',
            'amount_usd',
            'amount_atomic',
            'network',
            'asset',
            'pay_to',
            'resource_url',
            'x402_version',
            'message',
            'expires_at',
          ],
          properties: {
            approved: {
              type: 'boolean',
              enum: [false],
            },
            status: {
              type: 'string',
              enum: ['pending_confirmation'],
            },
            payment_id: {
              type: 'string',
            },
            confirmation_id: {
              type: 'string',
            },
            amount_usd: {
              type: 'number',
            },
            amount_atomic: {
              type: 'string',
            },
            network: {
              type: 'string',
            },
            asset: {
              type: 'string',
            },
            pay_to: {
              type: 'string',
            },
            resource_url: {
              type: 'string',
            },
            x402_version: {
              description: "The seller's x402 version: 2, or 1 for a seller on x402 v1 (header X-PAYMENT).",
              anyOf: [
                {
                  type: 'number',
                  enum: [1],
                },
                {
                  type: 'number',
                  enum: [2],
                },
              ],
            },
            message: {
              type: 'string',
            },
            expires_at: {
              type: 'string',
            },
          },
        },
      ],
    },
  },
  'POST /api/v1/bot/x402/pay': {
    input: {
      additionalProperties: false,
      type: 'object',
      required: ['resource_url', 'payment_requirements'],
      properties: {
        resource_url: {
          minLength: 1,
          maxLength: 2000,
          type: 'string',
        },
        payment_requirements: {
          anyOf: [
            {
              minItems: 1,
              maxItems: 20,
              type: 'array',
              items: {
                additionalProperties: true,
                description:
                  'x402 v2 PaymentRequirements: scheme ("exact"), network (CAIP-2, e.g. eip155:8453), asset (USDC contract, EIP-55), amount (atomic units, a whole number of them: "1000" is $0.001), payTo (EIP-55), maxTimeoutSeconds, extra {name, version}.',
                type: 'object',
                properties: {},
              },
            },
            {
              additionalProperties: true,
              description:
                'x402 v2 PaymentRequirements: scheme ("exact"), network (CAIP-2, e.g. eip155:8453), asset (USDC contract, EIP-55), amount (atomic units, a whole number of them: "1000" is $0.001), payTo (EIP-55), maxTimeoutSeconds, extra {name, version}.',
              type: 'object',
              properties: {},
            },
          ],
        },
        resource: {
          additionalProperties: false,
          type: 'object',
          properties: {
            url: {
              maxLength: 2000,
              type: 'string',
            },
            description: {
              maxLength: 500,
              type: 'string',
            },
            mimeType: {
              maxLength: 200,
              type: 'string',
            },
          },
        },
        description: {
          maxLength: 500,
          type: 'string',
        },
      },
    },
    output: {
      type: 'object',
      anyOf: [
        {
          type: 'object',
          required: [
            'approved',
            'status',
            'payment_id',
            'confirmation_id',
            'amount_usd',
            'amount_atomic',
            'network',
            'asset',
            'pay_to',
            'resource_url',
            'x402_version',
            'message',
            'valid_before',
            'payment_header_name',
            'payment_header',
            'payment_payload',
          ],
          properties: {
            approved: {
              type: 'boolean',
              enum: [true],
            },
            status: {
              type: 'string',
              enum: ['approved'],
            },
            payment_id: {
              type: 'string',
            },
            confirmation_id: {
              type: 'string',
            },
            amount_usd: {
              type: 'number',
            },
            amount_atomic: {
              type: 'string',
            },
            network: {
              type: 'string',
            },
            asset: {
              type: 'string',
            },
            pay_to: {
              type: 'string',
            },
            resource_url: {
              type: 'string',
            },
            x402_version: {
              description: "The seller's x402 version: 2, or 1 for a seller on x402 v1 (header X-PAYMENT).",
              anyOf: [
                {
                  type: 'number',
                  enum: [1],
                },
                {
                  type: 'number',
                  enum: [2],
                },
              ],
            },
            message: {
              type: 'string',
            },
            valid_before: {
              description: 'When the signed authorisation stops being valid (ISO 8601).',
              type: 'string',
            },
            payment_header_name: {
              description:
                'The request header that carries the payment: PAYMENT-SIGNATURE (x402 v2) or X-PAYMENT (x402 v1).',
              anyOf: [
                {
                  type: 'string',
                  enum: ['PAYMENT-SIGNATURE'],
                },
                {
                  type: 'string',
                  enum: ['X-PAYMENT'],
                },
              ],
            },
            payment_header: {
              description: 'base64 of payment_payload: send it as the header named payment_header_name.',
              type: 'string',
            },
            payment_payload: {
              additionalProperties: true,
              description: 'The x402 PaymentPayload (v2, or v1 for a v1 seller).',
              type: 'object',
              properties: {},
            },
          },
        },
        {
          type: 'object',
          required: [
            'approved',
            'status',
            'payment_id',
            'confirmation_id',
            'amount_usd',
            'amount_atomic',
            'network',
            'asset',
            'pay_to',
            'resource_url',
            'x402_version',
            'message',
            'expires_at',
          ],
          properties: {
            approved: {
              type: 'boolean',
              enum: [false],
            },
            status: {
              type: 'string',
              enum: ['pending_confirmation'],
            },
            payment_id: {
              type: 'string',
            },
            confirmation_id: {
              type: 'string',
            },
            amount_usd: {
              type: 'number',
            },
            amount_atomic: {
              type: 'string',
            },
            network: {
              type: 'string',
            },
            asset: {
              type: 'string',
            },
            pay_to: {
              type: 'string',
            },
            resource_url: {
              type: 'string',
            },
            x402_version: {
              description: "The seller's x402 version: 2, or 1 for a seller on x402 v1 (header X-PAYMENT).",
              anyOf: [
                {
                  type: 'number',
                  enum: [1],
                },
                {
                  type: 'number',
                  enum: [2],
                },
              ],
            },
            message: {
              type: 'string',
            },
            expires_at: {
              type: 'string',
            },
          },
        },
      ],
    },
  },
  'POST /api/v1/bot/x402/payments/{payment_id}/refusal': {
    input: {
      additionalProperties: false,
      type: 'object',
      properties: {
        reason: {
          maxLength: 200,
          description: "The seller's reason, as it said.",
          type: 'string',
        },
        seller_status: {
          minimum: 100,
          maximum: 599,
          type: 'integer',
        },
      },
    },
    output: {
      type: 'object',
      required: [
        'payment_id',
        'confirmation_id',
        'status',
        'payment_status',
        'amount_usd',
        'amount_atomic',
        'pay_to',
        'resource_url',
        'tx_hash',
        'x402_version',
        'message',
        'released',
      ],
      properties: {
        payment_id: {
          type: 'string',
        },
        confirmation_id: {
          type: 'string',
        },
        status: {
          anyOf: [
            {
              type: 'string',
              enum: ['pending'],
            },
            {
              type: 'string',
              enum: ['approved'],
            },
            {
              type: 'string',
              enum: ['denied'],
            },
            {
              type: 'string',
              enum: ['expired'],
            },
          ],
        },
        payment_status: {
          anyOf: [
            {
              type: 'string',
              enum: ['pending'],
            },
            {
              type: 'string',
              enum: ['authorized'],
            },
            {
              type: 'string',
              enum: ['settled'],
            },
            {
              type: 'string',
              enum: ['lapsed'],
            },
            {
              type: 'string',
              enum: ['denied'],
            },
            {
              type: 'string',
              enum: ['expired'],
            },
            {
              type: 'string',
              enum: ['refused'],
            },
          ],
        },
        amount_usd: {
          type: 'number',
        },
        amount_atomic: {
          type: 'string',
        },
        pay_to: {
          type: 'string',
        },
        resource_url: {
          type: 'string',
        },
        tx_hash: {
          anyOf: [
            {
              type: 'string',
            },
            {
              type: 'null',
            },
          ],
        },
        x402_version: {
          anyOf: [
            {
              type: 'number',
              enum: [1],
            },
            {
              type: 'number',
              enum: [2],
            },
          ],
        },
        message: {
          type: 'string',
        },
        refusal_reason: {
          type: 'string',
        },
        expires_at: {
          type: 'string',
        },
        valid_before: {
          type: 'string',
        },
        payment_header_name: {
          description:
            'The request header that carries the payment: PAYMENT-SIGNATURE (x402 v2) or X-PAYMENT (x402 v1).',
          anyOf: [
            {
              type: 'string',
              enum: ['PAYMENT-SIGNATURE'],
            },
            {
              type: 'string',
              enum: ['X-PAYMENT'],
            },
          ],
        },
        payment_header: {
          type: 'string',
        },
        payment_payload: {
          additionalProperties: true,
          type: 'object',
          properties: {},
        },
        released: {
          description:
            'True when the authorisation can never be used (the facilitator verification found why) and its amount is back.',
          type: 'boolean',
        },
      },
    },
  },
};
