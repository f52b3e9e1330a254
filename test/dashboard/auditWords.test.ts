import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { AUDIT_ACTIONS } from '../../src/owners/audit.ts';
import { AUDIT_ACTION_WORDS, auditWords } from '../../src/dashboard/views/activity.ts';

// The activity view words every action the service writes to audit_log, and nothing else.

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

describe('audit action wording', () => {
  it('has wording for every action and none for an unknown one', () => {
    expect(Object.keys(AUDIT_ACTION_WORDS).sort()).toEqual([...AUDIT_ACTIONS].sort());
    for (const action of AUDIT_ACTIONS) {
      expect(auditWords(action)).not.toBe(action);
      expect(auditWords(action).length).toBeGreaterThan(0);
    }
  });

  it('shows an unknown action as written, also one named like an object property', () => {
    expect(auditWords('something.else')).toBe('something.else');
    expect(auditWords('constructor')).toBe('constructor');
  });

  it('lists every literal action an audit() call in src/ writes', () => {
    const written = new Set<string>();
    for (const file of sourceFiles('src')) {
      const text = readFileSync(file, 'utf8');
      for (const call of text.matchAll(/\baudit\(tx, \{([^}]*)\}/g)) {
        for (const m of call[1]!.matchAll(/action: (?:[^,`]*\? )?'([a-z0-9_.]+)'(?: : '([a-z0-9_.]+)')?/g)) {
          written.add(m[1]!);
          if (m[2]) written.add(m[2]);
        }
      }
    }
    expect(written.size).toBeGreaterThan(20);
    for (const action of written) expect(AUDIT_ACTIONS).toContain(action);
  });
});
