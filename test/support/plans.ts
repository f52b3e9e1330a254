import type pg from 'pg';

/**
 * The plans PostgreSQL uses for every statement `run` executes on `client`, the nested statements of
 * functions and triggers included (auto_explain, sent to the client as LOG notices). A connection
 * keeps the plans it has cached, so these are the ones it really uses, not what a fresh EXPLAIN
 * would choose. PostgreSQL only; loading auto_explain needs a superuser (the test database's).
 */
export async function nestedPlans(
  client: pg.Client,
  run: () => Promise<unknown>,
  options: { analyze?: boolean } = {},
): Promise<string[]> {
  const plans: string[] = [];
  const collect = (n: { message?: string }) => {
    if (n.message?.includes('plan:')) plans.push(n.message);
  };
  await client.query("LOAD 'auto_explain'");
  await client.query('SET auto_explain.log_min_duration = 0');
  await client.query(`SET auto_explain.log_analyze = ${options.analyze ? 'on' : 'off'}`);
  await client.query('SET auto_explain.log_timing = off');
  await client.query('SET auto_explain.log_nested_statements = on');
  client.on('notice', collect);
  await client.query('SET client_min_messages = log');
  try {
    await run();
  } finally {
    await client.query('SET client_min_messages = notice');
    client.off('notice', collect);
  }
  return plans;
}
