// Regenerates src/generated.ts — the JSON Schemas of every bot operation, read from the OpenAPI
// document of the service as built from src/ — so that the published MCP server checks a tool's
// arguments with the very schema the route validates with, and declares the route's answers as
// the tool's output schema, without the service's source.
//   npm run generate -w packages/mcp
// test/generated.test.ts fails when this file and the routes disagree.
import { spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { botOperations } from '../../client/scripts/openapiToTs.ts';
import { loadOpenApi, REPO_ROOT } from '../../client/scripts/generate-types.ts';

type Schema = Record<string, unknown>;
interface OpenApiDoc {
  paths?: Record<string, Record<string, Schema>>;
}

export const GENERATED_FILE = join(REPO_ROOT, 'packages/mcp/src/generated.ts');

function jsonContent(holder: unknown): Schema | undefined {
  const content = (holder as { content?: Record<string, { schema?: Schema }> } | undefined)?.content;
  return content?.['application/json']?.schema;
}

/**
 * What a bot operation takes and answers as JSON Schema: `input` is the request body, or an object
 * of the query and path parameters (each with its own schema); `output` is the success answer, an
 * `anyOf` when the route has several (checkout: 200 approved, 202 held).
 */
export function operationSchemas(doc: OpenApiDoc): Record<string, { input: Schema; output: Schema }> {
  const out: Record<string, { input: Schema; output: Schema }> = {};
  // Registration needs no key and is no tool: the MCP server already runs as a registered bot.
  for (const key of botOperations(doc).filter((k) => k.includes(' /api/v1/bot/'))) {
    const [method, path] = key.split(' ') as [string, string];
    const op = doc.paths?.[path]?.[method.toLowerCase()] ?? {};
    if (JSON.stringify(op).includes('"$ref"')) throw new Error(`${key}: $ref is not supported here`);
    let input = jsonContent(op.requestBody);
    if (!input) {
      const params = ((op.parameters ?? []) as Schema[]).filter((p) => p.in === 'query' || p.in === 'path');
      const properties: Record<string, Schema> = {};
      const required: string[] = [];
      for (const p of params) {
        const name = String(p.name);
        properties[name] = {
          ...(p.schema as Schema),
          ...(typeof p.description === 'string' ? { description: p.description } : {}),
        };
        if (p.required === true) required.push(name);
      }
      input = { type: 'object', properties, ...(required.length ? { required } : {}) };
    }
    const answers = Object.entries((op.responses ?? {}) as Record<string, unknown>)
      .filter(([status]) => /^2\d\d$/.test(status))
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([, response]) => jsonContent(response))
      .filter((schema): schema is Schema => schema !== undefined);
    if (answers.length === 0) throw new Error(`${key}: no JSON success answer`);
    const output = answers.length === 1 ? (answers[0] as Schema) : { type: 'object', anyOf: answers };
    out[key] = { input, output };
  }
  return out;
}

export function renderSchemas(doc: OpenApiDoc): string {
  const operations = operationSchemas(doc);
  return [
    '// Generated from the service OpenAPI document by packages/mcp/scripts/generate-schemas.ts.',
    '// Do not edit: run `npm run generate -w packages/mcp` after changing a bot route schema.',
    '// test/generated.test.ts fails when this file and the routes disagree.',
    '',
    '/** A JSON Schema object, as it travels in tools/list. */',
    'export type JsonSchema = { [key: string]: unknown };',
    '',
    '/** Every bot operation behind the API key, as "METHOD /path". */',
    `export type OperationKey = ${Object.keys(operations)
      .map((k) => JSON.stringify(k))
      .join(' | ')};`,
    '',
    '/** Input (body, or query and path parameters) and success output of every bot operation, as JSON Schema. */',
    `export const OPERATIONS: Record<OperationKey, { input: JsonSchema; output: JsonSchema }> = ${JSON.stringify(operations, null, 2)};`,
    '',
  ].join('\n');
}

/** The file's text for a document: rendered, then formatted by the repository's Biome setup. */
export function generatedSource(doc: OpenApiDoc): string {
  const biome = join(REPO_ROOT, 'node_modules/.bin/biome');
  const formatted = spawnSync(biome, ['format', `--stdin-file-path=${relative(REPO_ROOT, GENERATED_FILE)}`], {
    cwd: REPO_ROOT,
    input: renderSchemas(doc),
    encoding: 'utf8',
  });
  if (formatted.status !== 0) throw new Error(`biome format failed: ${formatted.stderr}`);
  return formatted.stdout;
}

if (process.argv.slice(1, 3).some((arg) => resolve(arg) === fileURLToPath(import.meta.url))) {
  await writeFile(GENERATED_FILE, generatedSource((await loadOpenApi()) as OpenApiDoc));
  console.log(`wrote ${relative(process.cwd(), GENERATED_FILE)}`);
}
