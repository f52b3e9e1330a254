import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPostgres } from '../support/db.ts';
import { runCli } from '../support/process.ts';
import { createTestService, registerBot, type TestService } from '../support/service.ts';

// Every command the registration answer's steps tell a bot to run exists and takes the options it
// is given (issue 35, item 9: the steps said `npm install -g bot-payment-service`, a package that is
// not published). Each `botpay <command> --option …` named in a step is checked against that
// command's own --help, run as a real process; an `npm install -g` names only a copy of the source.
describe.runIf(!isPostgres)("the registration answer's steps", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  /** `botpay <command> …options` and `npm install -g <what>` named anywhere in a step. */
  function commandsIn(step: string) {
    // A command line: botpay, its command word, then at least one option up to the end of the
    // sentence (prose such as "the botpay command where…" has none and is not a command).
    const botpay = [];
    for (const m of step.matchAll(/\bbotpay(?:\.mjs)? ([a-z]+)([^;()]*)/g)) {
      const rest = (m[2] ?? '').split(/\.(?:\s|$)/)[0] ?? '';
      const options = [...rest.matchAll(/(?:^|\s)(--[a-z-]+)/g)].map((o) => o[1] as string);
      if (options.length > 0) botpay.push({ command: m[1] as string, options });
    }
    const installs = [...step.matchAll(/npm install -g (\S+)/g)].map((m) => m[1] as string);
    return { botpay, installs };
  }

  it.each(['primary', 'custom'])(
    'bot_type %s: every botpay command and option named exists',
    async (botType) => {
      const bot = await registerBot(svc, { callback_url: undefined, bot_type: botType });
      const setup = bot.tunnel_setup as { steps: string[]; tunnel_client_command: string };
      const found = setup.steps.map(commandsIn);
      const botpay = found.flatMap((f) => f.botpay);
      // The tunnel command is among them, as printed in tunnel_client_command.
      expect(botpay.some((c) => c.command === 'tunnel' && c.options.includes('--server'))).toBe(true);
      expect(setup.steps.join('\n')).toContain(setup.tunnel_client_command);
      const helps = new Map<string, string>();
      for (const { command, options } of botpay) {
        if (!helps.has(command)) {
          const help = await runCli([command, '--help'], {});
          expect(help.code, `botpay ${command} --help: ${help.stderr}`).toBe(0);
          helps.set(command, help.stdout);
        }
        for (const option of options)
          expect(helps.get(command), `botpay ${command} ${option}`).toContain(option);
      }
      // Installing: only from a copy of the source, whose package.json provides the botpay command.
      const installs = found.flatMap((f) => f.installs);
      expect(installs.length).toBeGreaterThan(0);
      for (const what of installs) expect(what === '.' || what.endsWith('.tgz'), what).toBe(true);
      const pkg = JSON.parse(await readFile('package.json', 'utf8')) as { bin: Record<string, string> };
      expect(pkg.bin.botpay).toBe('bin/botpay.mjs');
      expect(setup.steps.join('\n')).not.toMatch(/npm install -g bot-payment-service/);
    },
    60_000,
  );
});
