import { describe, expect, it } from 'vitest';
import { EMBEDDED_SHARED_BUFFERS, openPglite, rewriteSharedBuffers } from '../../src/platform/db/pglite.ts';

// The embedded database's buffer cache (src/platform/db/pglite.ts): PGlite compiles
// `shared_buffers=128MB` into its module, all of it resident from the start. openPglite lowers it.
// When this fails after a PGlite upgrade, the argument is no longer found in the module's memory:
// look for the new way to set it (an option of PGlite's, or the new argument's text).
describe('embedded database memory', () => {
  it(`PostgreSQL runs with shared_buffers = ${EMBEDDED_SHARED_BUFFERS}, and keeps durability on`, async () => {
    const db = await openPglite({});
    try {
      const show = async (name: string) =>
        Object.values((await db.query<Record<string, string>>(`SHOW ${name}`))[0] ?? {})[0];
      expect(await show('shared_buffers')).toBe(EMBEDDED_SHARED_BUFFERS);
      expect(await show('fsync')).toBe('on');
      expect(await show('synchronous_commit')).toBe('on');
      expect(await show('full_page_writes')).toBe('on');
    } finally {
      await db.close();
    }
  });

  it('rewrites the argument only when it is found exactly once', () => {
    const text = (s: string) => new Uint8Array(Buffer.from(s, 'latin1'));
    const once = text('xx\0shared_buffers=128MB\0-c\0work_mem=4MB\0');
    expect(rewriteSharedBuffers(once)).toBe(true);
    expect(Buffer.from(once).toString('latin1')).toContain(`\0shared_buffers=${EMBEDDED_SHARED_BUFFERS}\0`);
    expect(Buffer.from(once).toString('latin1')).toContain('\0-c\0work_mem=4MB\0');
    const twice = text('shared_buffers=128MB\0shared_buffers=128MB\0');
    expect(rewriteSharedBuffers(twice)).toBe(false);
    expect(Buffer.from(twice).toString('latin1')).toBe('shared_buffers=128MB\0shared_buffers=128MB\0');
    expect(rewriteSharedBuffers(text('shared_buffers=256MB\0'))).toBe(false);
    // A value longer than the original would overwrite the next string: refused.
    expect(rewriteSharedBuffers(text('shared_buffers=128MB\0'), '1234567MB')).toBe(false);
  });
});
