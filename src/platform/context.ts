import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config.ts';
import type { Clock } from './clock.ts';
import type { SecretBox } from './crypto.ts';
import type { Db } from './db/port.ts';
import type { Mailer } from './mailer.ts';
import type { Metrics } from './metrics.ts';

/** Dependencies built once at start-up and passed to every module (tests build their own). */
export interface AppContext {
  config: Config;
  db: Db;
  clock: Clock;
  secrets: SecretBox;
  mailer: Mailer;
  logger: FastifyBaseLogger;
  metrics: Metrics;
  /**
   * The managed-tunnel relay of this process, when the `tunnel` role runs here or instances share
   * tunnels (PostgreSQL: every instance). The webhook worker hands deliveries for tunnel bots
   * straight to it (no DNS), with identical bytes; it reaches tunnels held by other instances.
   */
  tunnelRelay?: LocalTunnelRelay;
}

export interface RelayedRequest {
  hostname: string;
  method: string;
  /** Path and query, e.g. /hooks/service */
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  timeoutMs: number;
}

export interface RelayedResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

export interface LocalTunnelRelay {
  /** True when a tunnel client for this hostname is connected to this process. */
  hasConnection(hostname: string): boolean;
  /** Sends the request through the tunnel; rejects when not connected or on timeout. */
  forward(request: RelayedRequest): Promise<RelayedResponse>;
  /**
   * True when forward() can reach the hostname's tunnel: connected here or, when instances share
   * tunnels (PostgreSQL), possibly held by another instance (forward() goes to the holder).
   */
  canDeliver?(hostname: string): boolean;
}
