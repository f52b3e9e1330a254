// Named queries: wide statements written once against an object, so that a field maps to its
// parameter in one place instead of by position in a list of twenty `$n`.
//
//   const call = namedCall<Params>('spend_run', { p_bot_id: (p) => p.botId, … });
//   await tx.query(`SELECT ${call.sql} AS r`, call.params(p));
//     → SELECT spend_run(p_bot_id => $1, …) AS r
//
//   const insert = namedInsert<Row>('bots', { id: (r) => r.id, … });
//   await tx.query(insert.sql, insert.params(row));
//     → INSERT INTO bots (id, …) VALUES ($1, …)
//
// Names are identifiers written in the code (checked here), never input.

type Field<T> = (input: T) => unknown;

export interface NamedStatement<T> {
  /** The SQL text, with $1… in the order of the mapping's keys. */
  sql: string;
  /** The parameter values of one input, in the same order. */
  params(input: T): unknown[];
  /** The names, in the same order (a call's parameters, an insert's columns). */
  names: readonly string[];
}

const IDENT = /^[a-z_][a-z0-9_]*$/;

function checked(names: string[]): string[] {
  for (const n of names) if (!IDENT.test(n)) throw new Error(`not an identifier: ${n}`);
  return names;
}

function values<T>(fields: Record<string, Field<T>>): (input: T) => unknown[] {
  const fns = Object.values(fields);
  return (input) => fns.map((f) => f(input));
}

/** `fn(name => $1, …)`: a database function called with named parameters. */
export function namedCall<T>(fn: string, fields: Record<string, Field<T>>): NamedStatement<T> {
  const names = checked([fn, ...Object.keys(fields)]).slice(1);
  return {
    sql: `${fn}(${names.map((n, i) => `${n} => $${i + 1}`).join(', ')})`,
    params: values(fields),
    names,
  };
}

/** `INSERT INTO table (col, …) VALUES ($1, …)`: one row from an object. */
export function namedInsert<T>(table: string, fields: Record<string, Field<T>>): NamedStatement<T> {
  const names = checked([table, ...Object.keys(fields)]).slice(1);
  return {
    sql: `INSERT INTO ${table} (${names.join(', ')}) VALUES (${names.map((_, i) => `$${i + 1}`).join(', ')})`,
    params: values(fields),
    names,
  };
}
