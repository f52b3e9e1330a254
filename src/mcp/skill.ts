import { readFileSync } from 'node:fs';
import type { App } from '../platform/http.ts';
import type { AppContext } from '../platform/context.ts';

// GET /skill.md: the skill file for agents (docs/skill.md, kept in the repository and tested against
// /openapi.json by test/mcp/skill.test.ts so it cannot drift). `{{BASE_URL}}` becomes this service's
// BASE_URL, so an agent that fetched the file can run its commands as written.

export const SKILL_FILE = new URL('../../docs/skill.md', import.meta.url);

export function renderSkill(template: string, baseUrl: string): string {
  return template.replaceAll('{{BASE_URL}}', baseUrl.replace(/\/+$/, ''));
}

export async function registerSkillRoutes(app: App, ctx: AppContext): Promise<void> {
  // Read once at start-up: a missing file is a packaging mistake and should stop the service.
  const body = renderSkill(readFileSync(SKILL_FILE, 'utf8'), ctx.config.baseUrl);
  app.get('/skill.md', { schema: { hide: true } }, async (_request, reply) =>
    reply
      .header('content-type', 'text/markdown; charset=utf-8')
      .header('cache-control', 'public, max-age=300')
      .send(body),
  );
}
