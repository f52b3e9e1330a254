// The wire protocol between the relay (in the service) and the tunnel client (docs/tunnels.md).
//
// Every WebSocket message is one binary frame:
//   [4 bytes: header length N, unsigned big-endian][N bytes: UTF-8 JSON header][rest: raw body]
// The JSON header has a `type`; bodies travel as raw bytes (no base64), so a relayed body is
// byte-for-byte what was sent. Frames are bounded by MAX_BODY_BYTES + MAX_HEADER_BYTES.

export const TUNNEL_CONNECT_PATH = '/api/v1/tunnel/connect';
export const PROTOCOL_VERSION = 1;

/** Request and response bodies through the tunnel are limited to 1 MB. */
export const MAX_BODY_BYTES = 1_048_576;
/** JSON header of a frame (method, path, headers): generous, but bounded. */
export const MAX_HEADER_BYTES = 64 * 1024;
export const MAX_FRAME_BYTES = MAX_BODY_BYTES + MAX_HEADER_BYTES + 4;

/** WebSocket close codes (4000-4999 are for applications). */
export const CLOSE_AUTH_REJECTED = 4401;
export const CLOSE_REPLACED = 4409;
export const CLOSE_SERVICE_RESTART = 1012;

export type HeaderPairs = Array<[string, string]>;

export type FrameHeader =
  | {
      type: 'hello';
      version: number;
      hostname: string;
      public_url: string;
      max_body_bytes: number;
      request_timeout_ms: number;
      heartbeat_ms: number;
    }
  | { type: 'request'; id: number; method: string; path: string; headers: HeaderPairs; timeout_ms: number }
  | { type: 'response'; id: number; status: number; headers: HeaderPairs }
  | { type: 'error'; id: number; message: string }
  | { type: 'cancel'; id: number };

export interface Frame {
  header: FrameHeader;
  body: Buffer;
}

const EMPTY = Buffer.alloc(0);

interface Corkable {
  cork(): void;
  uncork(): void;
}
const corked = new WeakSet<object>();

/**
 * Sends a frame; frames sent in the same tick leave in one write (the socket is corked until the
 * next tick), which matters when many requests share one tunnel.
 */
export function sendFrame(
  ws: { send(data: Buffer, cb?: (error?: Error) => void): void; readonly _socket?: unknown },
  frame: Buffer,
  cb: (error?: Error) => void = () => {},
): void {
  const socket = ws._socket as Corkable | undefined;
  if (socket && typeof socket.cork === 'function' && !corked.has(socket)) {
    corked.add(socket);
    socket.cork();
    process.nextTick(() => {
      corked.delete(socket);
      socket.uncork();
    });
  }
  ws.send(frame, cb);
}

export function encodeFrame(header: FrameHeader, body: Buffer = EMPTY): Buffer {
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const prefix = Buffer.allocUnsafe(4);
  prefix.writeUInt32BE(json.length, 0);
  return body.length > 0 ? Buffer.concat([prefix, json, body]) : Buffer.concat([prefix, json]);
}

export class FrameError extends Error {}

/** Parses and validates one frame; throws FrameError on anything malformed. */
export function decodeFrame(data: Buffer): Frame {
  if (data.length < 4) throw new FrameError('frame too short');
  const length = data.readUInt32BE(0);
  if (length > MAX_HEADER_BYTES || 4 + length > data.length) throw new FrameError('bad header length');
  let header: unknown;
  try {
    header = JSON.parse(data.subarray(4, 4 + length).toString('utf8'));
  } catch {
    throw new FrameError('header is not JSON');
  }
  if (!isFrameHeader(header)) throw new FrameError('unknown or malformed frame header');
  return { header, body: data.subarray(4 + length) };
}

function isHeaderPairs(value: unknown): value is HeaderPairs {
  return (
    Array.isArray(value) &&
    value.every(
      (pair) =>
        Array.isArray(pair) &&
        pair.length === 2 &&
        typeof pair[0] === 'string' &&
        typeof pair[1] === 'string',
    )
  );
}

function isFrameHeader(value: unknown): value is FrameHeader {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  const id = Number.isSafeInteger(v.id) && (v.id as number) > 0;
  switch (v.type) {
    case 'hello':
      return typeof v.hostname === 'string' && typeof v.public_url === 'string';
    case 'request':
      return id && typeof v.method === 'string' && typeof v.path === 'string' && isHeaderPairs(v.headers);
    case 'response':
      return id && Number.isInteger(v.status) && isHeaderPairs(v.headers);
    case 'error':
      return id && typeof v.message === 'string';
    case 'cancel':
      return id;
    default:
      return false;
  }
}

// Hop-by-hop headers (RFC 9110 §7.6.1) and those the next hop recomputes never cross the tunnel.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
  'content-length',
  'host',
]);

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field values: visible ASCII, spaces, tabs and obs-text; no CR, LF or NUL.
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** Header pairs fit to forward: valid names and values, hop-by-hop and length headers dropped. */
export function forwardableHeaders(pairs: Iterable<[string, string]>): HeaderPairs {
  const out: HeaderPairs = [];
  for (const [name, value] of pairs) {
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || !TOKEN.test(name) || !FIELD_VALUE.test(value)) continue;
    out.push([name, value]);
  }
  return out;
}

/** Node's rawHeaders ([k1, v1, k2, v2, …]) as pairs. */
export function pairsFromRaw(raw: string[]): HeaderPairs {
  const out: HeaderPairs = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i]!, raw[i + 1]!]);
  return out;
}
