import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import { BotPayClient, CLIENT_VERSION } from '../../packages/client/src/index.ts';
import { BOT_TOOLS, callTool, describeTool } from './tools.ts';

// `botpay mcp`: an MCP server on stdio that gives an agent the bot's tools (src/mcp/tools.ts),
// authenticated with the bot's API key from the environment. Built on the SDK's low-level Server
// (not McpServer) on purpose: McpServer wants zod schemas, while our input schemas are the routes'
// TypeBox schemas, which are already JSON Schema — tools/list serves them as they are.
// stdout carries the protocol only: every human-readable line goes to stderr.

export const MCP_USAGE = `Usage: botpay mcp

Runs an MCP server on standard input/output that exposes this bot's tools to an agent.
Environment:
  BOTPAY_API_KEY   the bot's API key (svc_live_…), required
  BOTPAY_URL       the service's address, default http://localhost:8080`;

export function createMcpServer(client: BotPayClient): Server {
  const server = new Server(
    { name: 'botpay', title: 'Bot Payment Service', version: CLIENT_VERSION },
    {
      capabilities: { tools: {} },
      instructions:
        'Tools of one bot of the Bot Payment Service. Call status first: until the owner claims the bot it is pending and cannot buy. Amounts are integer US cents in requests and USD in answers. A checkout is approved at once or held for the owner: then call wait_for_decision with its confirmation_id. Errors carry the service error code in "error".',
    },
  );
  const byName = new Map(BOT_TOOLS.map((t) => [t.name, t]));

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: BOT_TOOLS.map(describeTool) }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const t = byName.get(request.params.name);
    if (!t) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    const token = request.params._meta?.progressToken;
    const outcome = await callTool(t, request.params.arguments, {
      client,
      signal: extra.signal,
      ...(token === undefined
        ? {}
        : {
            progress: (progress: number, message: string) =>
              extra.sendNotification({
                method: 'notifications/progress',
                params: { progressToken: token, progress, message },
              }),
          }),
    });
    return {
      content: [{ type: 'text' as const, text: JSON.stringify(outcome.body, null, 2) }],
      structuredContent: outcome.body,
      isError: outcome.isError,
    };
  });
  return server;
}

export async function mcpCommand(args: string[]): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    console.error(MCP_USAGE);
    return 0;
  }
  const apiKey = process.env.BOTPAY_API_KEY?.trim();
  if (!apiKey) {
    console.error(`botpay mcp: set BOTPAY_API_KEY to the bot's API key.\n\n${MCP_USAGE}`);
    return 2;
  }
  let client: BotPayClient;
  try {
    client = new BotPayClient({
      baseUrl: process.env.BOTPAY_URL?.trim() || 'http://localhost:8080',
      apiKey,
      userAgent: `botpay-mcp/${CLIENT_VERSION}`,
    });
  } catch (error) {
    console.error(`botpay mcp: BOTPAY_URL ${error instanceof Error ? error.message : String(error)}`);
    return 2;
  }
  const warning = plainHttpWarning(client.baseUrl);
  if (warning) console.error(warning);
  const server = createMcpServer(client);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    server.onclose = () => resolve();
  });
  await server.connect(transport);
  // The agent ends the session by closing our stdin.
  process.stdin.once('end', () => void server.close());
  await closed;
  return 0;
}

/** A warning when the API key would cross a network unencrypted (http to a host other than loopback). */
export function plainHttpWarning(baseUrl: string): string | undefined {
  const url = new URL(baseUrl);
  if (url.protocol !== 'http:') return undefined;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (host === 'localhost' || host === '::1' || /^127\./.test(host)) return undefined;
  return `botpay mcp: warning: BOTPAY_URL is plain http to ${host}: the bot's API key would travel unencrypted. Use https.`;
}
