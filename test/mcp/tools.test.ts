import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import type { BotPayClient } from '../../packages/client/src/index.ts';
import { BOT_TOOLS, callTool, describeTool } from '../../packages/mcp/src/tools.ts';

// The tool table on its own (the stdio server against a real service is test/mcp/mcp.test.ts).

describe('MCP tool definitions', () => {
  it('every input schema is a closed JSON Schema object that survives JSON', () => {
    for (const t of BOT_TOOLS) {
      const described = describeTool(t);
      expect(described.inputSchema.type, t.name).toBe('object');
      expect(described.inputSchema.additionalProperties, t.name).toBe(false);
      expect(JSON.parse(JSON.stringify(described))).toEqual(described);
    }
    expect(new Set(BOT_TOOLS.map((t) => t.name)).size).toBe(BOT_TOOLS.length);
  });

  it('every tool declares an output schema: a JSON Schema object that compiles', () => {
    const ajv = new Ajv({ strict: false });
    for (const t of BOT_TOOLS) {
      const described = describeTool(t);
      expect(described.outputSchema.type, t.name).toBe('object');
      expect(() => ajv.compile(described.outputSchema), t.name).not.toThrow();
    }
  });

  it('a fault inside a tool (not an answer of the service) is a tool error internal_error', async () => {
    const status = BOT_TOOLS.find((t) => t.name === 'status')!;
    // A client that breaks before any request: the edge of the world for this unit.
    const broken = {
      status: () => {
        throw new TypeError('boom');
      },
    } as unknown as BotPayClient;
    expect(await callTool(status, undefined, { client: broken })).toEqual({
      isError: true,
      body: { error: 'internal_error', message: 'boom' },
    });
  });

  it('arguments are checked before the client is touched', async () => {
    const checkout = BOT_TOOLS.find((t) => t.name === 'checkout')!;
    const untouchable = new Proxy(
      {},
      {
        get() {
          throw new Error('the client must not be used');
        },
      },
    ) as BotPayClient;
    const outcome = await callTool(checkout, { profile_index: 1 }, { client: untouchable });
    expect(outcome).toMatchObject({ isError: true, body: { error: 'validation_error' } });
  });
});
