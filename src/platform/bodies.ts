// What every JSON request body goes through before any handler sees it (wired in app.ts):
// - `jsonDepthExceeded`: nesting deeper than MAX_JSON_DEPTH is refused on the text, before it is
//   parsed (a body nested 20,000 deep used to reach the audit log's serialiser and overflow its
//   stack);
// - `strictBodySchema`: a route's body schema with `additionalProperties: false` on every object
//   that does not say otherwise, so a field the route does not know is a 400 naming it, never
//   stored, logged or audited. An object that says `additionalProperties: true` keeps it (the x402
//   payment payload, a protocol object of its own).

/**
 * The deepest nesting of objects and arrays a JSON body may have (`{}` is 1, `{"a":[]}` 2). The
 * deepest body of the API is an x402 payment payload (5); 32 leaves room without inviting abuse.
 */
export const MAX_JSON_DEPTH = 32;

/**
 * True when the JSON text nests objects or arrays deeper than `max`. One pass over the text,
 * skipping strings (and their escapes); it does not check the syntax, which the parser does next.
 */
export function jsonDepthExceeded(text: string, max = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > max) return true;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
    }
  }
  return false;
}

type SchemaNode = Record<string | symbol, unknown>;

/**
 * A copy of a body schema in which every object schema without an `additionalProperties` of its
 * own gets `false` (into properties, array items and alternatives). TypeBox's symbol keys are kept.
 */
export function strictBodySchema<T>(schema: T): T {
  return strict(schema) as T;
}

function strict(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(strict);
  if (node === null || typeof node !== 'object') return node;
  const source = node as SchemaNode;
  const copy: SchemaNode = { ...source };
  if (isPlainRecord(source.properties)) {
    copy.properties = Object.fromEntries(
      Object.entries(source.properties).map(([name, value]) => [name, strict(value)]),
    );
  }
  for (const key of ['items', 'anyOf', 'oneOf', 'prefixItems'] as const) {
    if (source[key] !== undefined) copy[key] = strict(source[key]);
  }
  // allOf parts are checked one by one: a closed part would refuse the other parts' fields.
  if (source.allOf !== undefined) {
    throw new Error('a body schema uses allOf: use Type.Composite so that it can be closed');
  }
  const isObject = source.type === 'object' || isPlainRecord(source.properties);
  if (isObject && source.additionalProperties === undefined) copy.additionalProperties = false;
  return copy;
}

function isPlainRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
