// Generated from the service OpenAPI document by packages/client/scripts/generate-types.ts.
// Do not edit: run `npm run generate -w packages/client` after changing a bot route schema.
// test/generated.test.ts fails when this file and the routes disagree.

/** Request and response types of every bot endpoint, keyed by "METHOD /path". */
export interface BotOperations {
  'GET /api/v1/bot/merchant/checkout/status': {
    query: {
      confirmation_id: string;
    };
    responses: {
      200: {
        confirmation_id: string;
        status: 'pending' | 'approved' | 'denied' | 'expired';
        amount_usd: number;
        merchant_name: string;
        item_name: string;
        message: string;
        missing_digits?: string;
        expiry_month?: string;
        expiry_year?: string;
        expires_at?: string;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      404: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'GET /api/v1/bot/messages': {
    query: {
      limit?: number;
    };
    responses: {
      200: {
        messages: Array<{
          id: string;
          event: string;
          timestamp: string;
          bot_id: string;
          data: Record<string, unknown>;
        }>;
        has_more: boolean;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'GET /api/v1/bot/status': {
    responses: {
      200: {
        bot_id: string;
        bot_name: string;
        status: 'active' | 'pending' | 'frozen' | 'inactive';
        default_rail: string | null;
        active_rails?: Array<string>;
        rails: Record<
          string,
          {
            status: string;
            balance_usd: number;
            spending_limits?: {
              per_transaction_usd: number;
              monthly_usd: number;
              monthly_spent_usd: number;
              monthly_remaining_usd: number;
            };
            address?: string;
            balance_read_at?: string | null;
            network?: string;
            [key: string]: unknown;
          }
        >;
        master_guardrails: {
          per_transaction_usd: number;
          daily_budget_usd: number;
          monthly_budget_usd: number;
        } | null;
        message?: string;
        pending_messages?: number;
        pending_topups?: number;
        webhook_status?: string;
        webhook_fail_count?: number;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'GET /api/v1/bot/wallet/check': {
    responses: {
      200: {
        wallet_status: string;
        balance_usd: number;
        card_status: string;
        spending_limits: {
          per_transaction_usd: number;
          monthly_usd: number;
          monthly_spent_usd: number;
          monthly_remaining_usd: number;
        };
        pending_topups: number;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'GET /api/v1/bot/wallet/topup-requests': {
    query: {
      limit?: number;
      before?: string;
    };
    responses: {
      200: {
        topup_requests: Array<{
          topup_id: string;
          status: 'pending' | 'approved' | 'declined' | 'expired';
          amount_usd: number;
          reason: string;
          approved_amount_usd?: number;
          note?: string;
          created_at: string;
          expires_at: string;
          decided_at: string | null;
        }>;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'GET /api/v1/bot/x402/payments/{payment_id}': {
    responses: {
      200: {
        payment_id: string;
        confirmation_id: string;
        status: 'pending' | 'approved' | 'denied' | 'expired';
        payment_status: 'pending' | 'authorized' | 'settled' | 'lapsed' | 'denied' | 'expired' | 'refused';
        amount_usd: number;
        amount_atomic: string;
        pay_to: string;
        resource_url: string;
        tx_hash: string | null;
        x402_version: 1 | 2;
        message: string;
        refusal_reason?: string;
        expires_at?: string;
        valid_before?: string;
        payment_header_name?: 'PAYMENT-SIGNATURE' | 'X-PAYMENT';
        payment_header?: string;
        payment_payload?: Record<string, unknown>;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      404: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bot/merchant/checkout': {
    body: {
      profile_index: number;
      merchant_name: string;
      merchant_url: string;
      item_name: string;
      amount_cents: number;
      category?: string;
      task_id?: string;
      card_id?: string;
    };
    responses: {
      200: {
        approved: true;
        missing_digits: string;
        expiry_month: string;
        expiry_year: string;
        confirmation_id: string;
        profile_index: number;
        merchant_name: string;
        amount_usd: number;
        message: string;
      };
      202: {
        approved: false;
        status: 'pending_confirmation';
        confirmation_id: string;
        profile_index: number;
        merchant_name: string;
        amount_usd: number;
        expires_at: string;
        message: string;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      402: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      403: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      404: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      409: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      429: {
        error: 'rate_limited';
        message: string;
        retry_after_seconds: number;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bot/messages/ack': {
    body: {
      event_ids: Array<string>;
    };
    responses: {
      200: {
        acknowledged: Array<string>;
        not_found: Array<string>;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bot/tasks/next': {
    responses: {
      200: {
        has_task: boolean;
        task_type?: 'purchase';
        task_id?: string;
        instructions?: {
          profile_index: number;
          merchant_name: string;
          merchant_url: string;
          item_name: string;
          amount_cents: number;
          category: string;
          card_id?: string;
        };
        message: string;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bot/wallet/topup-requests': {
    body: {
      amount_cents: number;
      reason: string;
    };
    responses: {
      200: {
        topup_id: string;
        status: 'pending' | 'approved' | 'declined' | 'expired';
        amount_usd: number;
        reason: string;
        approved_amount_usd?: number;
        note?: string;
        created_at: string;
        expires_at: string;
        decided_at: string | null;
        message: string;
      };
      201: {
        topup_id: string;
        status: 'pending' | 'approved' | 'declined' | 'expired';
        amount_usd: number;
        reason: string;
        approved_amount_usd?: number;
        note?: string;
        created_at: string;
        expires_at: string;
        decided_at: string | null;
        message: string;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      403: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      429: {
        error: 'rate_limited';
        message: string;
        retry_after_seconds: number;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bot/x402/fetch': {
    body: {
      url: string;
      method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
      headers?: Record<string, string>;
      body?: string;
      body_base64?: string;
      description?: string;
      payment_id?: string;
    };
    responses: {
      200: {
        paid: boolean;
        payment: {
          payment_id: string;
          payment_status: 'pending' | 'denied' | 'expired' | 'authorized' | 'settled' | 'lapsed' | 'refused';
          amount_usd: number;
          amount_atomic: string;
          pay_to: string;
          network: string;
          x402_version: 1 | 2;
          tx_hash: string | null;
          refusal_reason: string | null;
          valid_before: string | null;
        } | null;
        response: {
          status: number;
          headers: Record<string, string>;
          body_text?: string;
          body_base64?: string;
          truncated: boolean;
        };
        message: string;
      };
      202: {
        approved: false;
        status: 'pending_confirmation';
        payment_id: string;
        confirmation_id: string;
        amount_usd: number;
        amount_atomic: string;
        network: string;
        asset: string;
        pay_to: string;
        resource_url: string;
        x402_version: 1 | 2;
        message: string;
        expires_at: string;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      402: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      403: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      404: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      409: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      429: {
        error: 'rate_limited';
        message: string;
        retry_after_seconds: number;
        [key: string]: unknown;
      };
      502: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bot/x402/pay': {
    body: {
      resource_url: string;
      payment_requirements: Array<Record<string, unknown>> | Record<string, unknown>;
      resource?: {
        url?: string;
        description?: string;
        mimeType?: string;
      };
      description?: string;
    };
    responses: {
      200: {
        approved: true;
        status: 'approved';
        payment_id: string;
        confirmation_id: string;
        amount_usd: number;
        amount_atomic: string;
        network: string;
        asset: string;
        pay_to: string;
        resource_url: string;
        x402_version: 1 | 2;
        message: string;
        valid_before: string;
        payment_header_name: 'PAYMENT-SIGNATURE' | 'X-PAYMENT';
        payment_header: string;
        payment_payload: Record<string, unknown>;
      };
      202: {
        approved: false;
        status: 'pending_confirmation';
        payment_id: string;
        confirmation_id: string;
        amount_usd: number;
        amount_atomic: string;
        network: string;
        asset: string;
        pay_to: string;
        resource_url: string;
        x402_version: 1 | 2;
        message: string;
        expires_at: string;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      402: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      403: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      409: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      429: {
        error: 'rate_limited';
        message: string;
        retry_after_seconds: number;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bot/x402/payments/{payment_id}/refusal': {
    body: {
      reason?: string;
      seller_status?: number;
    };
    responses: {
      200: {
        payment_id: string;
        confirmation_id: string;
        status: 'pending' | 'approved' | 'denied' | 'expired';
        payment_status: 'pending' | 'authorized' | 'settled' | 'lapsed' | 'denied' | 'expired' | 'refused';
        amount_usd: number;
        amount_atomic: string;
        pay_to: string;
        resource_url: string;
        tx_hash: string | null;
        x402_version: 1 | 2;
        message: string;
        refusal_reason?: string;
        expires_at?: string;
        valid_before?: string;
        payment_header_name?: 'PAYMENT-SIGNATURE' | 'X-PAYMENT';
        payment_header?: string;
        payment_payload?: Record<string, unknown>;
        released: boolean;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      401: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      404: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      429: {
        error: 'rate_limited';
        message: string;
        retry_after_seconds: number;
        [key: string]: unknown;
      };
    };
  };
  'POST /api/v1/bots/register': {
    body: {
      bot_name: string;
      owner_email: string;
      description?: string;
      callback_url?: string;
      pairing_code?: string;
      bot_type?: string;
      local_port?: number;
      webhook_path?: string;
    };
    responses: {
      201: {
        bot_id: string;
        api_key: string;
        claim_token: string | null;
        status: 'pending_owner_verification' | 'active';
        owner_verification_url?: string;
        paired?: boolean;
        owner_uid?: string;
        webhook_secret?: string;
        webhook_note?: string;
        webhook_url?: string;
        tunnel_token?: string;
        tunnel_setup?: {
          webhook_url: string;
          tunnel_token: string;
          tunnel_client_command: string;
          local_port: number;
          webhook_path: string;
          steps: Array<string>;
          webhook_headers: Record<string, string>;
          retry_policy: string;
          primary_gateway_config?: Record<string, unknown>;
          [key: string]: unknown;
        };
        primary_hooks_token?: string;
        primary_hooks_token_note?: string;
        important: string;
      };
      400: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      409: {
        error: string;
        message?: string;
        [key: string]: unknown;
      };
      429: {
        error: 'rate_limited';
        message: string;
        retry_after_seconds: number;
        [key: string]: unknown;
      };
    };
  };
}
