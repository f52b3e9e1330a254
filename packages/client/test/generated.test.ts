import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../../../test/support/service.ts';
import { GENERATED_FILE, generatedSource } from '../scripts/generate-types.ts';
import { botOperations, renderBotTypes } from '../scripts/openapiToTs.ts';
import { CLIENT_OPERATIONS } from '../src/client.ts';

// The SDK's types cannot drift from the service: src/generated.ts must be exactly what the
// generator makes from the current route schemas, and every bot route must have a client method.

describe('generated types', () => {
  let svc: TestService;
  let doc: Record<string, unknown>;
  beforeAll(async () => {
    svc = await createTestService();
    doc = svc.app.swagger() as unknown as Record<string, unknown>;
  });
  afterAll(async () => {
    await svc?.close();
  });

  it('src/generated.ts is up to date (run `npm run generate -w packages/client` if not)', async () => {
    const committed = await readFile(GENERATED_FILE, 'utf8');
    expect(generatedSource(doc)).toBe(committed);
  });

  it('the client calls every bot endpoint the service documents', () => {
    const documented = botOperations(doc as Parameters<typeof botOperations>[0]);
    expect(documented.length).toBeGreaterThanOrEqual(3);
    const missing = documented.filter((op) => !(CLIENT_OPERATIONS as readonly string[]).includes(op));
    expect(missing).toEqual([]);
  });

  it('renders references, query parameters, nullable and union schemas', () => {
    const text = renderBotTypes({
      components: {
        schemas: { Money: { type: 'object', required: ['usd'], properties: { usd: { type: 'number' } } } },
      },
      paths: {
        '/api/v1/bot/thing': {
          get: {
            parameters: [
              { in: 'query', name: 'confirmation_id', required: true, schema: { type: 'string' } },
              { in: 'query', name: 'limit', schema: { type: 'integer' } },
            ],
            responses: {
              '200': {
                content: {
                  'application/json': {
                    schema: {
                      type: 'object',
                      required: ['price', 'state'],
                      properties: {
                        price: { $ref: '#/components/schemas/Money' },
                        state: { type: 'string', enum: ['a', 'b'] },
                        note: { type: 'string', nullable: true },
                        tags: { type: 'array', items: { anyOf: [{ type: 'string' }, { type: 'null' }] } },
                        'x-y': { type: ['integer', 'null'] },
                      },
                    },
                  },
                },
              },
            },
          },
        },
        '/api/v1/owner/ignored': { get: { responses: {} } },
      },
    });
    expect(text).toContain("'GET /api/v1/bot/thing'".replaceAll("'", '"'));
    expect(text).not.toContain('owner');
    expect(text).toContain('confirmation_id: string;');
    expect(text).toContain('limit?: number;');
    expect(text).toMatch(/price: \{\n\s+usd: number;\n\s+\};/);
    expect(text).toContain('state: "a" | "b";');
    expect(text).toContain('note?: string | null;');
    expect(text).toContain('tags?: Array<string | null>;');
    expect(text).toContain('"x-y"?: number | null;');
  });
});
