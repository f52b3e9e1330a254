import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config.ts';
import type { Clock } from './clock.ts';
import type { SecretBox } from './crypto.ts';
import type { Db } from './db/port.ts';
import type { Mailer } from './mailer.ts';

/** Dependencies built once at start-up and passed to every module (tests build their own). */
export interface AppContext {
  config: Config;
  db: Db;
  clock: Clock;
  secrets: SecretBox;
  mailer: Mailer;
  logger: FastifyBaseLogger;
}
