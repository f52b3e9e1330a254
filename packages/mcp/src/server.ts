import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { type BotPayClient, CLIENT_VERSION } from '../../client/src/index.ts';
import { BOT_TOOLS, type BotTool, callTool, describeTool } from './tools.ts';

// The MCP server of one bot: tools/list and tools/call over whatever transport it is connected to
// (stdio in src/bin.ts, Streamable HTTP at the service's /mcp). Built on the SDK's low-level
// Server (not McpServer) on purpose: McpServer wants zod schemas, while our schemas are the
// routes' JSON Schemas — tools/list serves them as they are.

export const INSTRUCTIONS =
  'Tools of one bot of the Bot Payment Service. Call status first: until the owner claims the bot it is pending and cannot buy. Amounts are integer US cents in requests and USD in answers. A checkout is approved at once or held for the owner: then call wait_for_decision with its confirmation_id. Errors carry the service error code in "error".';

/** A JSON-RPC error whose message is sent as it is (McpError would prefix "MCP error <code>: "). */
class ProtocolError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export function createMcpServer(client: BotPayClient, tools: readonly BotTool[] = BOT_TOOLS): Server {
  const server = new Server(
    { name: 'botpay', title: 'Bot Payment Service', version: CLIENT_VERSION },
    { capabilities: { tools: {} }, instructions: INSTRUCTIONS },
  );
  const byName = new Map(tools.map((t) => [t.name, t]));

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: tools.map(describeTool) }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const t = byName.get(request.params.name);
    // The client adds "MCP error -32602: " itself: the message is said once.
    if (!t) throw new ProtocolError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
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
    const content = [{ type: 'text' as const, text: JSON.stringify(outcome.body, null, 2) }];
    // structuredContent is what the output schema describes: a success. An error is the text (the
    // service's error envelope as JSON) with isError, as the MCP specification has tool errors.
    return outcome.isError ? { content, isError: true } : { content, structuredContent: outcome.body };
  });
  return server;
}
