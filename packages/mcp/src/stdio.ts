import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { BotPayClient, CLIENT_VERSION } from '../../client/src/index.ts';
import { createMcpServer } from './server.ts';

// The stdio server of `npx @botpay/mcp` (src/bin.ts) and of the service's `botpay mcp`: an MCP server on stdio that
// gives an agent the bot's tools, authenticated with the bot's API key from the environment.
// stdout carries the protocol only: every human-readable line goes to stderr.

export function usage(program: string): string {
  return `Usage: ${program}

Runs an MCP server on standard input/output that exposes this bot's tools to an agent.
Environment:
  BOTPAY_API_KEY   the bot's API key (svc_live_…), required
  BOTPAY_URL       the service's address, default http://localhost:8080`;
}

/** A warning when the API key would cross a network unencrypted (http to a host other than loopback). */
export function plainHttpWarning(program: string, baseUrl: string): string | undefined {
  const url = new URL(baseUrl);
  if (url.protocol !== 'http:') return undefined;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (host === 'localhost' || host === '::1' || /^127\./.test(host)) return undefined;
  return `${program}: warning: BOTPAY_URL is plain http to ${host}: the bot's API key would travel unencrypted. Use https.`;
}

/** Serves the tools on stdin/stdout until the agent closes stdin; the exit code. */
export async function runStdio(
  program: string,
  args: readonly string[],
  env: Record<string, string | undefined> = process.env,
): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    console.error(usage(program));
    return 0;
  }
  const apiKey = env.BOTPAY_API_KEY?.trim();
  if (!apiKey) {
    console.error(`${program}: set BOTPAY_API_KEY to the bot's API key.\n\n${usage(program)}`);
    return 2;
  }
  let client: BotPayClient;
  try {
    client = new BotPayClient({
      baseUrl: env.BOTPAY_URL?.trim() || 'http://localhost:8080',
      apiKey,
      userAgent: `botpay-mcp/${CLIENT_VERSION}`,
    });
  } catch (error) {
    console.error(`${program}: BOTPAY_URL ${error instanceof Error ? error.message : String(error)}`);
    return 2;
  }
  const warning = plainHttpWarning(program, client.baseUrl);
  if (warning) console.error(warning);
  const server = createMcpServer(client);
  const closed = new Promise<void>((resolve) => {
    server.onclose = () => resolve();
  });
  await server.connect(new StdioServerTransport());
  // The agent ends the session by closing our stdin.
  process.stdin.once('end', () => void server.close());
  await closed;
  return 0;
}
