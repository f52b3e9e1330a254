// The managed tunnel's wire protocol, version 2 (WebSocket subprotocol `botpay-tunnel.2`), the
// part a client speaks: the service's relay sends a hello and requests (and cancels), the client
// answers with responses and errors. Every WebSocket message is one binary frame:
//   [1 byte type][4 bytes id][4 bytes n][4 bytes M = meta length][M bytes meta, UTF-8][body]
// (integers unsigned big-endian; n is the timeout of a request in ms, the status of a response).
// The meta of a request is its method, path and header names and values, of a response its header
// names and values, each ended by LF; of an error its message; of the hello a JSON object.
// The service's own copy is src/tunnels/protocol.ts in its repository (the package does not import
// the service); packages/client/test/tunnel.test.ts holds the two to the same bytes.

export const TUNNEL_CONNECT_PATH = '/api/v1/tunnel/connect';
export const SUBPROTOCOL_V2 = 'botpay-tunnel.2';
/** Request and response bodies through the tunnel are limited to 1 MB. */
export const MAX_BODY_BYTES = 1_048_576;
/** The meta of a frame (method, path, headers) is limited to 64 KiB. */
export const MAX_HEADER_BYTES = 64 * 1024;
export const MAX_FRAME_BYTES = MAX_BODY_BYTES + MAX_HEADER_BYTES + 13;

/** WebSocket close codes the relay uses. */
export const CLOSE_AUTH_REJECTED = 4401;
export const CLOSE_REPLACED = 4409;

export const FRAME_HELLO = 1;
export const FRAME_REQUEST = 2;
export const FRAME_RESPONSE = 3;
export const FRAME_ERROR = 4;
export const FRAME_CANCEL = 5;
const HEADER_BYTES = 13;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export interface Hello {
  type: 'hello';
  hostname: string;
  public_url: string;
  max_body_bytes?: number;
  request_timeout_ms?: number;
  heartbeat_ms?: number;
}

export interface RequestFrame {
  type: 'request';
  id: number;
  method: string;
  path: string;
  /** Header fields as sent: [name, value, name, value, …]. */
  fields: string[];
  timeoutMs: number;
  body: Buffer;
}

export type IncomingFrame = Hello | RequestFrame | { type: 'cancel'; id: number };

export class FrameError extends Error {}

/**
 * Decodes a frame from the relay; throws FrameError on anything malformed. A frame whose first
 * byte is 0 is a version 1 frame (a service from before version 2 that ignored the subprotocol).
 */
export function decodeFrame(data: Buffer): IncomingFrame {
  if (data.length < HEADER_BYTES) throw new FrameError('frame too short');
  const type = data[0];
  const id = data.readUInt32BE(1);
  const n = data.readUInt32BE(5);
  const metaLength = data.readUInt32BE(9);
  if (metaLength > MAX_HEADER_BYTES || HEADER_BYTES + metaLength > data.length) {
    throw new FrameError('bad header length');
  }
  const meta = metaLength > 0 ? data.toString('utf8', HEADER_BYTES, HEADER_BYTES + metaLength) : '';
  if (type === FRAME_HELLO) {
    let hello: Record<string, unknown>;
    try {
      hello = JSON.parse(meta) as Record<string, unknown>;
    } catch {
      throw new FrameError('hello is not JSON');
    }
    if (typeof hello?.hostname !== 'string' || typeof hello.public_url !== 'string') {
      throw new FrameError('malformed hello');
    }
    return { ...hello, type: 'hello' } as Hello;
  }
  if (id === 0) throw new FrameError('request id 0');
  if (type === FRAME_CANCEL) return { type: 'cancel', id };
  if (type !== FRAME_REQUEST) throw new FrameError(`unexpected frame type ${type}`);
  const methodEnd = meta.indexOf('\n');
  const pathEnd = methodEnd < 0 ? -1 : meta.indexOf('\n', methodEnd + 1);
  const method = methodEnd < 0 ? '' : meta.slice(0, methodEnd);
  const path = pathEnd < 0 ? '' : meta.slice(methodEnd + 1, pathEnd);
  const fields: string[] = [];
  let at = pathEnd + 1;
  while (pathEnd >= 0 && at < meta.length) {
    const end = meta.indexOf('\n', at);
    if (end < 0) throw new FrameError('malformed request');
    fields.push(meta.slice(at, end));
    at = end + 1;
  }
  if (pathEnd < 0 || fields.length % 2 !== 0 || !TOKEN.test(method) || !path.startsWith('/')) {
    throw new FrameError('malformed request');
  }
  return {
    type: 'request',
    id,
    method,
    path,
    fields,
    timeoutMs: n,
    body: data.subarray(HEADER_BYTES + metaLength),
  };
}

function frame(type: number, id: number, n: number, meta: string, body: Uint8Array | undefined): Buffer {
  const metaBytes = Buffer.byteLength(meta, 'utf8');
  if (metaBytes > MAX_HEADER_BYTES) throw new FrameError('frame header too large');
  const size = body ? body.byteLength : 0;
  const out = Buffer.allocUnsafe(HEADER_BYTES + metaBytes + size);
  out[0] = type;
  out.writeUInt32BE(id, 1);
  out.writeUInt32BE(n, 5);
  out.writeUInt32BE(metaBytes, 9);
  if (metaBytes > 0) out.write(meta, HEADER_BYTES, metaBytes, 'utf8');
  if (body && size > 0) out.set(body, HEADER_BYTES + metaBytes);
  return out;
}

/** A response frame; header fields containing a line feed are left out (never forwardable). */
export function encodeResponse(
  id: number,
  status: number,
  fields: readonly string[],
  body: Uint8Array | undefined,
): Buffer {
  let meta = '';
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i] as string;
    const value = fields[i + 1] as string;
    if (name.includes('\n') || value.includes('\n')) continue;
    meta += `${name}\n${value}\n`;
  }
  return frame(FRAME_RESPONSE, id, status, meta, body);
}

/** An error frame: the relay answers the request 502 `tunnel_upstream_error` with this message. */
export function encodeError(id: number, message: string): Buffer {
  return frame(FRAME_ERROR, id, 0, message.replace(/\n/g, ' ').slice(0, 300), undefined);
}

/** The WebSocket URL of the relay for a service base URL (keeps a path prefix). */
export function connectUrl(server: string): string {
  const url = new URL(server);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new TypeError(`server must be an http:// or https:// URL, got "${server}"`);
  }
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${TUNNEL_CONNECT_PATH}`;
  url.search = '';
  url.hash = '';
  return url.toString();
}
