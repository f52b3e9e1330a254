// `node --import ./test/support/moduleLog.mjs …`: appends the URL of every module the process
// loads (ES modules, and CommonJS packages imported from them) to the file named by
// BOTPAY_MODULE_LOG. Used by test/foundation/lazyLoading.test.ts.
import { register } from 'node:module';

register(
  `data:text/javascript,${encodeURIComponent(`
import { appendFileSync } from 'node:fs';
export async function load(url, context, next) {
  const result = await next(url, context);
  if (process.env.BOTPAY_MODULE_LOG) appendFileSync(process.env.BOTPAY_MODULE_LOG, url + '\\n');
  return result;
}`)}`,
);
