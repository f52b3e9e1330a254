// What a bot without a public address needs to run the managed tunnel.

export interface TunnelSetup {
  webhook_url: string;
  tunnel_token: string;
  tunnel_client_command: string;
  local_port: number;
  webhook_path: string;
  steps: string[];
  webhook_headers: Record<string, string>;
  retry_policy: string;
  primary_gateway_config?: PrimaryGatewayConfig;
}

export interface PrimaryGatewayConfig {
  hooks: {
    enabled: boolean;
    token: string;
    mappings: Array<{
      match: { path: string };
      action: string;
      name: string;
      agentId: string;
      messageTemplate: string;
      deliver: boolean;
    }>;
  };
}

export const CLI_NAME = 'botpay';

export function tunnelHostname(idSuffix: string, tunnelDomain: string): string {
  return `bot-${idSuffix}.${tunnelDomain}`;
}

/**
 * The public webhook URL. It follows BASE_URL's scheme and port, so a development service on
 * http://localhost:8080 hands out http://bot-x.tunnel.localhost:8080/... that really works; in
 * production (https BASE_URL on 443) it is exactly the documented https://bot-<id>.{tunnel_domain}<path>.
 */
export function tunnelWebhookUrl(baseUrl: string, hostname: string, webhookPath: string): string {
  const base = new URL(baseUrl);
  const port = base.port ? `:${base.port}` : '';
  return `${base.protocol}//${hostname}${port}${webhookPath}`;
}

export function tunnelClientCommand(
  baseUrl: string,
  token: string,
  localPort: number,
  webhookPath: string,
): string {
  return `${CLI_NAME} tunnel --server ${baseUrl} --token ${token} --port ${localPort} --path ${webhookPath}`;
}

export function primaryGatewayConfig(webhookPath: string): PrimaryGatewayConfig {
  return {
    hooks: {
      enabled: true,
      // A reference to the environment variable, never the raw token.
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the gateway expands it, not JavaScript
      token: '${SERVICE_HOOKS_TOKEN}',
      mappings: [
        {
          match: { path: webhookPath },
          action: 'agent',
          name: 'Bot Payment Service',
          agentId: 'main',
          messageTemplate: 'Payment service event {{event}}: {{description}}',
          deliver: true,
        },
      ],
    },
  };
}

export function buildTunnelSetup(options: {
  baseUrl: string;
  webhookUrl: string;
  tunnelToken: string;
  localPort: number;
  webhookPath: string;
  primary: boolean;
}): TunnelSetup {
  const command = tunnelClientCommand(
    options.baseUrl,
    options.tunnelToken,
    options.localPort,
    options.webhookPath,
  );
  const steps = [
    `Install the client: npm install -g bot-payment-service (provides the ${CLI_NAME} command).`,
    `Run your webhook receiver on http://127.0.0.1:${options.localPort}${options.webhookPath}.`,
    `Start the tunnel and keep it running: ${command}`,
    'Verify the X-Service-Signature header of every delivery with your webhook_secret (HMAC-SHA256 of the raw body).',
  ];
  if (options.primary) {
    steps.push(
      'Set SERVICE_HOOKS_TOKEN to primary_hooks_token in your gateway environment and add primary_gateway_config to its configuration.',
    );
  }
  return {
    webhook_url: options.webhookUrl,
    tunnel_token: options.tunnelToken,
    tunnel_client_command: command,
    local_port: options.localPort,
    webhook_path: options.webhookPath,
    steps,
    webhook_headers: {
      'X-Service-Signature': 'sha256=<hmac>',
      'X-Service-Event': '<event_type>',
    },
    retry_policy:
      'Failed deliveries are retried up to 5 times with exponential backoff (1 min, 5 min, 15 min, 1 h, 6 h); undelivered events stay readable at GET /api/v1/bot/messages.',
    ...(options.primary ? { primary_gateway_config: primaryGatewayConfig(options.webhookPath) } : {}),
  };
}
