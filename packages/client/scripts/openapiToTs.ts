// Turns the bot endpoints of the service's OpenAPI document into TypeScript types. No external
// dependencies: the schemas come from TypeBox, so the subset of JSON Schema to cover is small
// (objects, arrays, unions, enums, constants, nullable, $ref to components).

type Schema = Record<string, unknown>;

interface OpenApiDoc {
  paths?: Record<string, Record<string, unknown>>;
  components?: { schemas?: Record<string, Schema> };
}

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

/** The paths a bot calls: the public registration and everything behind the bot API key. */
export function isBotPath(path: string): boolean {
  return path === '/api/v1/bots/register' || path.startsWith('/api/v1/bot/');
}

/** "METHOD /path" of every bot operation in the document, sorted. */
export function botOperations(doc: OpenApiDoc): string[] {
  const out: string[] = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    if (!isBotPath(path)) continue;
    for (const method of METHODS) if (item[method]) out.push(`${method.toUpperCase()} ${path}`);
  }
  return out.sort();
}

export function renderBotTypes(doc: OpenApiDoc): string {
  const lines: string[] = [
    '// Generated from the service OpenAPI document by packages/client/scripts/generate-types.ts.',
    '// Do not edit: run `npm run generate -w packages/client` after changing a bot route schema.',
    '// test/generated.test.ts fails when this file and the routes disagree.',
    '',
    '/** Request and response types of every bot endpoint, keyed by "METHOD /path". */',
    'export interface BotOperations {',
  ];
  for (const key of botOperations(doc)) {
    const [method, path] = key.split(' ') as [string, string];
    const op = (doc.paths?.[path]?.[method.toLowerCase()] ?? {}) as Schema;
    lines.push(`  ${JSON.stringify(key)}: {`);
    const query = queryType(doc, op);
    if (query) lines.push(`    query: ${indent(query, 4)};`);
    const body = requestBody(op);
    if (body) lines.push(`    body: ${indent(render(doc, body, new Set()), 4)};`);
    lines.push('    responses: {');
    const responses = (op.responses ?? {}) as Record<string, Schema>;
    for (const status of Object.keys(responses).sort()) {
      const schema = jsonContent(responses[status]);
      lines.push(`      ${status}: ${indent(schema ? render(doc, schema, new Set()) : 'unknown', 6)};`);
    }
    lines.push('    };', '  };');
  }
  lines.push('}', '');
  return lines.join('\n');
}

function jsonContent(holder: Schema | undefined): Schema | undefined {
  const content = holder?.content as Record<string, { schema?: Schema }> | undefined;
  return content?.['application/json']?.schema;
}

function requestBody(op: Schema): Schema | undefined {
  return jsonContent(op.requestBody as Schema | undefined);
}

function queryType(doc: OpenApiDoc, op: Schema): string | undefined {
  const params = ((op.parameters ?? []) as Schema[]).filter((p) => p.in === 'query');
  if (params.length === 0) return undefined;
  const props = params.map((p) => {
    const optional = p.required === true ? '' : '?';
    return `${key(String(p.name))}${optional}: ${render(doc, (p.schema ?? {}) as Schema, new Set())};`;
  });
  return `{\n${props.map((p) => `  ${p}`).join('\n')}\n}`;
}

function key(name: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(name) ? name : JSON.stringify(name);
}

function indent(text: string, spaces: number): string {
  return text.replace(/\n/g, `\n${' '.repeat(spaces)}`);
}

function render(doc: OpenApiDoc, schema: Schema, seen: Set<string>): string {
  const ref = schema.$ref;
  if (typeof ref === 'string') {
    const name = ref.replace(/^#\/components\/schemas\//, '');
    const target = doc.components?.schemas?.[name];
    if (!target || seen.has(name)) return 'unknown';
    return render(doc, target, new Set([...seen, name]));
  }
  const nullable = schema.nullable === true;
  const base = renderBase(doc, schema, seen);
  return nullable ? `${base} | null` : base;
}

function renderBase(doc: OpenApiDoc, schema: Schema, seen: Set<string>): string {
  if ('const' in schema) return JSON.stringify(schema.const);
  if (Array.isArray(schema.enum)) return schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  for (const union of ['anyOf', 'oneOf'] as const) {
    const members = schema[union];
    if (Array.isArray(members)) return unionOf(members.map((m) => render(doc, m as Schema, seen)));
  }
  if (Array.isArray(schema.allOf)) {
    return schema.allOf.map((m) => wrap(render(doc, m as Schema, seen))).join(' & ');
  }
  const type = schema.type;
  if (Array.isArray(type)) return unionOf(type.map((t) => render(doc, { ...schema, type: t }, seen)));
  switch (type) {
    case 'string':
      return 'string';
    case 'number':
    case 'integer':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array':
      return `Array<${render(doc, (schema.items ?? {}) as Schema, seen)}>`;
    case 'object':
      return renderObject(doc, schema, seen);
    default:
      return schema.properties ? renderObject(doc, schema, seen) : 'unknown';
  }
}

function renderObject(doc: OpenApiDoc, schema: Schema, seen: Set<string>): string {
  const properties = (schema.properties ?? {}) as Record<string, Schema>;
  const required = new Set((schema.required ?? []) as string[]);
  const names = Object.keys(properties);
  const extra = schema.additionalProperties;
  if (names.length === 0) {
    if (extra && typeof extra === 'object') return `Record<string, ${render(doc, extra as Schema, seen)}>`;
    return extra === false ? 'Record<string, never>' : 'Record<string, unknown>';
  }
  const lines = names.map((name) => {
    const optional = required.has(name) ? '' : '?';
    return `  ${key(name)}${optional}: ${indent(render(doc, properties[name] as Schema, seen), 2)};`;
  });
  if (extra === true) lines.push('  [key: string]: unknown;');
  else if (extra && typeof extra === 'object') lines.push('  [key: string]: unknown;');
  return `{\n${lines.join('\n')}\n}`;
}

function unionOf(members: string[]): string {
  const unique = [...new Set(members)];
  return unique.length === 0 ? 'never' : unique.map(wrap).join(' | ');
}

function wrap(type: string): string {
  return hasTopLevelUnion(type) ? `(${type})` : type;
}

/** True when `type` contains a `|` outside braces, brackets and angle brackets. */
function hasTopLevelUnion(type: string): boolean {
  let depth = 0;
  for (const ch of type) {
    if (ch === '{' || ch === '<' || ch === '[' || ch === '(') depth++;
    else if (ch === '}' || ch === '>' || ch === ']' || ch === ')') depth--;
    else if (ch === '|' && depth === 0) return true;
  }
  return false;
}
