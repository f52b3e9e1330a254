import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prepared, preparedName } from '../../src/platform/db/port.ts';
import { isPostgres } from '../support/db.ts';
import { createTestService, type TestService } from '../support/service.ts';

// Statements marked with prepared() (the checkout call) are parsed and planned once per connection
// on PostgreSQL: named statements, listed in the session's pg_prepared_statements. Other
// statements stay unnamed.
describe.runIf(isPostgres)('prepared statements on PostgreSQL', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { DATABASE_POOL_SIZE: '2' } });
  });
  afterAll(async () => {
    await svc.close();
  });

  it('a marked statement is prepared once per connection and answers like an unmarked one', async () => {
    const sql = prepared('SELECT $1::int + 1 AS n');
    const name = preparedName(sql);
    expect(name).toMatch(/^botpay_\d+$/);
    expect(preparedName('SELECT $1::int + 2 AS n')).toBeUndefined();
    const seen = await svc.ctx.db.transaction(async (tx) => {
      const [a] = await tx.query<{ n: number }>(sql, [1]);
      const [b] = await tx.query<{ n: number }>(sql, [2]);
      expect([a?.n, b?.n]).toEqual([2, 3]);
      return tx.query<{ name: string; statement: string }>(
        'SELECT name, statement FROM pg_prepared_statements WHERE name = $1',
        [name],
      );
    });
    expect(seen).toEqual([{ name, statement: sql }]);
  });
});
