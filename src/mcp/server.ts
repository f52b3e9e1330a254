import { runStdio } from '../../packages/mcp/src/stdio.ts';

// `botpay mcp`: the MCP server of packages/mcp (the one `npx @botpay/mcp` runs) on stdio, from a
// checkout of the service. The same tools are served over Streamable HTTP at /mcp (src/mcp/http.ts).

export async function mcpCommand(args: string[]): Promise<number> {
  return runStdio('botpay mcp', args);
}
