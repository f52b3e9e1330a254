import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../../../test/support/service.ts';
import { GENERATED_FILE, generatedSource, type operationSchemas } from '../scripts/generate-schemas.ts';
import { OPERATIONS } from '../src/generated.ts';
import { BOT_TOOLS } from '../src/tools.ts';

// The published MCP server's schemas cannot drift from the service: src/generated.ts must be
// exactly what the generator makes from the current route schemas.

describe('generated tool schemas', () => {
  let svc: TestService;
  let doc: Parameters<typeof operationSchemas>[0];
  beforeAll(async () => {
    svc = await createTestService();
    doc = svc.app.swagger() as unknown as typeof doc;
  });
  afterAll(async () => {
    await svc?.close();
  });

  it('src/generated.ts is up to date (run `npm run generate -w packages/mcp` if not)', async () => {
    const committed = await readFile(GENERATED_FILE, 'utf8');
    expect(generatedSource(doc)).toBe(committed);
  });

  it('every tool input is its route’s schema, closed, and every output its route’s answer', () => {
    const checkout = BOT_TOOLS.find((t) => t.name === 'checkout')!;
    const route = OPERATIONS['POST /api/v1/bot/merchant/checkout'];
    expect(checkout.input.required).toEqual(route.input.required);
    expect(checkout.input.properties).toMatchObject(route.input.properties as object);
    expect(checkout.output.anyOf).toEqual(route.output.anyOf);
    const status = BOT_TOOLS.find((t) => t.name === 'status')!;
    expect(status.output).toBe(OPERATIONS['GET /api/v1/bot/status'].output);
  });
});
