// Valid sample bodies built from a route's JSON Schema, shared by the hostile suites (fuzz.test.ts,
// bodies.test.ts): each starts from a body that passes validation, so the field under test (or the
// unknown field) is what decides the answer.

export interface SampleSchema {
  type?: string | string[];
  format?: string;
  pattern?: string;
  minimum?: number;
  minLength?: number;
  const?: unknown;
  enum?: unknown[];
  anyOf?: SampleSchema[];
  items?: SampleSchema;
  minItems?: number;
  properties?: Record<string, SampleSchema>;
  required?: string[];
}

/** Values that pass the schema of fields with a pattern or format (field name → value). */
const KNOWN_VALID: Record<string, unknown> = {
  bin: '411111',
  expiry_month: '12',
  expiry_year: '2030',
  card_length: 16,
  profile_index: 1,
  amount_cents: 100,
  merchant_url: 'https://shop.example.com/item',
  callback_url: 'https://bot.example.com/hook',
  resource_url: 'https://api.example.com/data',
  owner_email: 'sample-owner@example.com',
  cron: '0 9 * * *',
  timezone: 'UTC',
  webhook_path: '/webhook',
  event_ids: ['evt_aaaaaaaaaaaaaaaa'],
  claim_token: 'svc_claim_x',
};

/** A value of the schema's type that passes it where that is easy. */
export function sampleValue(name: string, schema: SampleSchema): unknown {
  if (name in KNOWN_VALID) return KNOWN_VALID[name];
  if (schema.const !== undefined) return schema.const;
  if (schema.enum?.length) return schema.enum[0];
  if (schema.anyOf?.length) return sampleValue(name, schema.anyOf[0]!);
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case 'integer':
    case 'number':
      return Math.max(schema.minimum ?? 1, 1);
    case 'boolean':
      return false;
    case 'array':
      return [];
    case 'object':
      return sampleBody(schema);
    default:
      return schema.format === 'email' ? 'sample@example.com' : 'sample'.padEnd(schema.minLength ?? 0, 'x');
  }
}

/** The schema's required fields with sample values (nested objects likewise). */
export function sampleBody(schema: SampleSchema | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of schema?.required ?? []) {
    const field = schema?.properties?.[name];
    if (field) out[name] = sampleValue(name, field);
  }
  return out;
}
