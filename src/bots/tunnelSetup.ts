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

/** The environment variable the tunnel client reads its token from (never the command line). */
export const TUNNEL_TOKEN_ENV = 'BOTPAY_TUNNEL_TOKEN';

/**
 * A webhook path is a URL path and lands on a command line: `/`-separated segments of RFC 3986
 * unreserved characters and `%XX` escapes, with `:@+,=` (no `..` or `.` segment, no `//`, no query,
 * nothing a shell would interpret: `; $ ( ) | & ' " \` < > * ? !` and spaces are refused).
 */
export function isValidWebhookPath(path: string): boolean {
  if (path.length < 1 || path.length > 200) return false;
  if (!/^(?:\/(?:[A-Za-z0-9\-._~:@+,=]|%[0-9A-Fa-f]{2})*)+$/.test(path)) return false;
  const segments = path.split('/').slice(1);
  return !segments.some((s, i) => s === '.' || s === '..' || (s === '' && i < segments.length - 1));
}

export const WEBHOOK_PATH_RULE =
  'webhook_path must start with /, be at most 200 characters, and use only letters, digits, - . _ ~ : @ + , = and %XX escapes between slashes (no // and no . or .. segments)';

/** One word for POSIX sh: as is when it has no special characters, else single-quoted. */
export function shellQuote(word: string): string {
  if (/^[A-Za-z0-9_\-.,/:@%+=]+$/.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * The command that runs the tunnel client with its token, as one POSIX sh line that works as
 * printed, every word quoted. The token travels in the environment variable BOTPAY_TUNNEL_TOKEN
 * (an assignment before the command), never as an argument: arguments are visible to every user
 * in `ps`, a process's environment only to its own user. A bot that keeps the token in a file runs
 * the same command without the assignment and with --token-file FILE.
 */
export function tunnelClientCommand(
  baseUrl: string,
  localPort: number,
  webhookPath: string,
  tunnelToken: string,
): string {
  const argv = [CLI_NAME, 'tunnel', '--server', baseUrl, '--port', String(localPort), '--path', webhookPath];
  return `${TUNNEL_TOKEN_ENV}=${shellQuote(tunnelToken)} ${argv.map(shellQuote).join(' ')}`;
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
    options.localPort,
    options.webhookPath,
    options.tunnelToken,
  );
  const steps = [
    `Get the ${CLI_NAME} command where the bot runs: it comes with the service's source (run npm install -g . inside a copy of it, or use node bin/${CLI_NAME}.mjs inside a checkout in place of ${CLI_NAME}).`,
    `Run your webhook receiver on http://127.0.0.1:${options.localPort}${options.webhookPath}.`,
    `Start the tunnel and keep it running: ${command}`,
    `Until the tunnel client first connects, deliveries wait for it (nothing is lost or counted as failed).`,
    `The command passes tunnel_token in the environment variable ${TUNNEL_TOKEN_ENV}, which ps does not show to other users; it is never an argument. To keep it in a file only you can read instead, drop the ${TUNNEL_TOKEN_ENV}=… assignment and add --token-file FILE.`,
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
