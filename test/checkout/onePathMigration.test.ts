import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/platform/db/migrate.ts';
import { createTestService } from '../support/service.ts';
import { createSchedule, scheduleBody, world } from '../tasks/helpers.ts';
import { checkout, purchase } from './helpers.ts';

// Migration 0028 (one path for every profile), run on a database as the previous version left it:
// a held decoy the service was to decide by itself (decide_at, decoy_outcome) and an owner schedule
// made on a decoy profile (its shadows skipped that profile and the real one). The migrated test
// database is put back to that state (0028 unrecorded, its schema changes undone) and migrated again.

describe('migration 0028: one path for every profile', () => {
  it('sends pending decoys to the owner unmailed, and moves a schedule on a decoy to the real profile with a shadow for the decoy', async () => {
    const svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
    try {
      const w = await world(svc, { wideMaster: true });
      const real = w.card.real_profile_index;
      const decoy = real === 1 ? 2 : 1;
      const held = await checkout(svc, w.bot, purchase(decoy, 100));
      expect(held.statusCode, held.body).toBe(202);
      const heldId = held.json().confirmation_id as string;
      const created = await createSchedule(svc, w, scheduleBody(w.card));
      expect(created.statusCode, created.body).toBe(201);
      const scheduleId = created.json().schedule_id as string;
      const db = svc.ctx.db;
      await db.transaction(async (tx) => {
        // The previous version's state.
        await tx.query(
          `UPDATE checkout_confirmations SET decide_at = created_at + interval '90 seconds', decoy_outcome = 'approved',
             owner_mailed_at = NULL WHERE id = $1`,
          [heldId],
        );
        await tx.query(
          `UPDATE task_schedules SET instructions = jsonb_set(instructions, '{profile_index}', to_jsonb($2::int)) WHERE id = $1`,
          [scheduleId, decoy],
        );
        await tx.query(
          `DELETE FROM task_schedules WHERE shadow_of = $1 AND (instructions->>'profile_index')::int = $2`,
          [scheduleId, decoy],
        );
        await tx.exec(`ALTER TABLE cards DROP COLUMN same_card_as;
          DROP INDEX checkout_confirmations_owner_pending_idx;
          CREATE INDEX checkout_confirmations_owner_pending_idx ON checkout_confirmations (owner_id, created_at)
            WHERE status = 'pending' AND is_real;
          DROP INDEX checkout_confirmations_owner_mail_idx;
          CREATE INDEX checkout_confirmations_owner_mail_idx ON checkout_confirmations (created_at)
            WHERE is_real AND status = 'pending' AND owner_mailed_at IS NULL;
          CREATE INDEX checkout_confirmations_owner_decided_idx ON checkout_confirmations (owner_id, decided_at DESC)
            WHERE is_real AND decided_by IN ('owner', 'expiry');
          CREATE FUNCTION decoy_decision_sample(
            p_owner_id text, p_delay_ms integer, p_sigma real, p_deny real, p_expire real, p_window_seconds integer,
            OUT delay_ms bigint, OUT outcome text) LANGUAGE sql AS $$ SELECT 1000::bigint, 'approved'::text $$;
          DELETE FROM schema_migrations WHERE version = 28;`);
      });
      const shadowsBefore = await db.query<{ p: number }>(
        `SELECT (instructions->>'profile_index')::int AS p FROM task_schedules WHERE shadow_of = $1 ORDER BY 1`,
        [scheduleId],
      );
      expect(shadowsBefore.map((r) => r.p)).not.toContain(real);
      expect(shadowsBefore.map((r) => r.p)).not.toContain(decoy);

      expect(await migrate(db)).toEqual([28]);

      const [row] = await db.query<Record<string, unknown>>(
        'SELECT decide_at, decoy_outcome, owner_mailed_at IS NOT NULL AS mailed, status FROM checkout_confirmations WHERE id = $1',
        [heldId],
      );
      expect(row).toEqual({ decide_at: null, decoy_outcome: null, mailed: true, status: 'pending' });
      // It is in the owner's inbox, and the owner decides it.
      const inbox = (await svc.app.inject({ url: '/api/v1/owner/approvals', headers: w.owner.auth })).json();
      expect(inbox.approvals.map((a: { confirmation_id: string }) => a.confirmation_id)).toContain(heldId);
      const [schedule] = await db.query<{ p: number }>(
        `SELECT (instructions->>'profile_index')::int AS p FROM task_schedules WHERE id = $1`,
        [scheduleId],
      );
      expect(schedule?.p).toBe(real);
      const shadowsAfter = await db.query<{ p: number; id: string }>(
        `SELECT (instructions->>'profile_index')::int AS p, id FROM task_schedules WHERE shadow_of = $1 ORDER BY 1`,
        [scheduleId],
      );
      expect(shadowsAfter.map((r) => r.p)).toEqual([1, 2, 3, 4, 5, 6].filter((p) => p !== real));
      for (const s of shadowsAfter) expect(s.id).toMatch(/^schedule_[a-z2-7]{16}$/);
      const fns = await db.query(
        `SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE p.proname = $1 AND n.nspname = current_schema()`,
        ['decoy_decision_sample'],
      );
      expect(fns).toHaveLength(0);
    } finally {
      await svc.close();
    }
  });
});
