// The wire protocol between the relay (in the service) and the tunnel client (docs/tunnels.md).
//
// Every WebSocket message is one binary frame. Version 2 (WebSocket subprotocol
// `botpay-tunnel.2`, what `botpay tunnel` speaks) has a fixed 13-byte header and no JSON per
// request:
//   [1 byte type][4 bytes id][4 bytes n][4 bytes M = meta length][M bytes meta, UTF-8][body]
// (integers unsigned big-endian; n is the timeout of a request, the status of a response). The
// meta of a request is its method, path and header names and values, of a response its header
// names and values, each ended by LF (no field can contain one); of an error its message; of the
// hello a JSON object (once per connection). Version 1 (no subprotocol: clients before version 2)
// frames were [4 bytes N][N bytes JSON header][body]; the relay still serves them.
// Bodies are raw bytes either way, byte-for-byte what was sent; frames are bounded by
// MAX_BODY_BYTES + MAX_HEADER_BYTES.

export const TUNNEL_CONNECT_PATH = '/api/v1/tunnel/connect';
/** The protocol version of the original JSON-header frames (a client that names no subprotocol). */
export const PROTOCOL_VERSION = 1;
/** The binary-header protocol, negotiated as the WebSocket subprotocol `botpay-tunnel.2`. */
export const PROTOCOL_V2 = 2;
export const SUBPROTOCOL_V2 = 'botpay-tunnel.2';
/** Subprotocols the relay accepts (a client naming only others is refused with 426). */
export const SUBPROTOCOLS = [SUBPROTOCOL_V2];

/** Request and response bodies through the tunnel are limited to 1 MB. */
export const MAX_BODY_BYTES = 1_048_576;
/** Header of a frame (method, path, headers): generous, but bounded. */
export const MAX_HEADER_BYTES = 64 * 1024;
export const MAX_FRAME_BYTES = MAX_BODY_BYTES + MAX_HEADER_BYTES + 13;

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
 * Sends a frame; frames sent in the same event-loop iteration leave in one write: the socket is
 * corked until setImmediate, which runs after every socket that was readable in this iteration
 * has been handled (answers from many local connections, requests from many HTTP clients). With
 * process.nextTick, nearly every frame was its own write system call under load. (Holding the
 * socket corked for a further turn or two while local answers are outstanding saved no writes.)
 */
export function sendFrame(
  ws: { send(data: Buffer, cb?: (error?: Error) => void): void; readonly _socket?: unknown },
  frame: Buffer,
  cb?: (error?: Error) => void,
): void {
  const socket = ws._socket as Corkable | undefined;
  if (socket && typeof socket.cork === 'function' && !corked.has(socket)) {
    corked.add(socket);
    socket.cork();
    setImmediate(uncork, socket);
  }
  ws.send(frame, cb);
}

function uncork(socket: Corkable): void {
  corked.delete(socket);
  socket.uncork();
}

export class FrameError extends Error {}

/** One protocol version's frame format (the relay picks one per connection, the client too). */
export interface Codec {
  readonly version: number;
  encode(header: FrameHeader, body?: Buffer): Buffer;
  /** Parses and validates one frame; throws FrameError on anything malformed. */
  decode(data: Buffer): Frame;
}

// ---- Version 1: [4 bytes N][N bytes JSON header][body] ----

export function encodeJsonFrame(header: FrameHeader, body: Buffer = EMPTY): Buffer {
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const prefix = Buffer.allocUnsafe(4);
  prefix.writeUInt32BE(json.length, 0);
  return body.length > 0 ? Buffer.concat([prefix, json, body]) : Buffer.concat([prefix, json]);
}

export function decodeJsonFrame(data: Buffer): Frame {
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

export const jsonCodec: Codec = {
  version: PROTOCOL_VERSION,
  encode: encodeJsonFrame,
  decode: decodeJsonFrame,
};

// ---- Version 2: [1 type][4 id][4 n][4 M][M meta][body] ----

export const FRAME_HELLO = 1;
export const FRAME_REQUEST = 2;
export const FRAME_RESPONSE = 3;
export const FRAME_ERROR = 4;
export const FRAME_CANCEL = 5;
/** Bytes before the meta of a version 2 frame. */
export const BINARY_HEADER_BYTES = 13;
const MAX_ID = 0xffff_ffff;
const NEWLINE = /\n/;

/** Appends name LF value LF for each pair; a pair containing LF (never forwardable) is left out. */
function pairsMeta(prefix: string, pairs: HeaderPairs): string {
  let meta = prefix;
  for (const [name, value] of pairs) {
    if (name.includes('\n') || value.includes('\n')) continue;
    meta += `${name}\n${value}\n`;
  }
  return meta;
}

function binaryFrame(type: number, id: number, n: number, meta: string, body: Buffer): Buffer {
  const metaBytes = Buffer.byteLength(meta, 'utf8');
  if (metaBytes > MAX_HEADER_BYTES) throw new FrameError('frame header too large');
  const frame = Buffer.allocUnsafe(BINARY_HEADER_BYTES + metaBytes + body.length);
  frame[0] = type;
  frame.writeUInt32BE(id, 1);
  frame.writeUInt32BE(n, 5);
  frame.writeUInt32BE(metaBytes, 9);
  if (metaBytes > 0) frame.write(meta, BINARY_HEADER_BYTES, metaBytes, 'utf8');
  if (body.length > 0) body.copy(frame, BINARY_HEADER_BYTES + metaBytes);
  return frame;
}

export function encodeBinaryFrame(header: FrameHeader, body: Buffer = EMPTY): Buffer {
  switch (header.type) {
    case 'hello': {
      const { type: _type, ...hello } = header;
      return binaryFrame(FRAME_HELLO, 0, 0, JSON.stringify(hello), EMPTY);
    }
    case 'request':
      if (NEWLINE.test(header.method) || NEWLINE.test(header.path)) {
        throw new FrameError('method and path cannot contain a line feed');
      }
      return binaryFrame(
        FRAME_REQUEST,
        header.id,
        Math.min(Math.max(0, Math.floor(header.timeout_ms)), MAX_ID),
        pairsMeta(`${header.method}\n${header.path}\n`, header.headers),
        body,
      );
    case 'response':
      return binaryFrame(FRAME_RESPONSE, header.id, header.status, pairsMeta('', header.headers), body);
    case 'error':
      return binaryFrame(FRAME_ERROR, header.id, 0, header.message, EMPTY);
    case 'cancel':
      return binaryFrame(FRAME_CANCEL, header.id, 0, '', EMPTY);
  }
}

/** A response's header fields as an HTTP client read them: [name, value, …] (bytes or text) or a record. */
export type RawHeaders = Buffer[] | string[] | Record<string, unknown>;

/**
 * A response frame from header fields as read off the wire (undici's rawHeaders). In version 2 the
 * meta is assembled from the bytes themselves: no string per field and no re-encoding (the relay
 * decodes it as UTF-8, as it would the re-encoded text). A field containing LF is left out.
 */
export function encodeRawResponse(
  codec: Codec,
  id: number,
  status: number,
  raw: RawHeaders,
  body: Buffer,
): Buffer {
  if (codec.version !== PROTOCOL_V2 || !Array.isArray(raw) || !raw.every(Buffer.isBuffer)) {
    return codec.encode({ type: 'response', id, status, headers: rawPairs(raw) }, body);
  }
  const fields = raw as Buffer[];
  let metaBytes = 0;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i] as Buffer;
    const value = fields[i + 1] as Buffer;
    if (name.includes(10) || value.includes(10)) continue;
    metaBytes += name.length + value.length + 2;
  }
  if (metaBytes > MAX_HEADER_BYTES) throw new FrameError('frame header too large');
  const frame = Buffer.allocUnsafe(BINARY_HEADER_BYTES + metaBytes + body.length);
  frame[0] = FRAME_RESPONSE;
  frame.writeUInt32BE(id, 1);
  frame.writeUInt32BE(status, 5);
  frame.writeUInt32BE(metaBytes, 9);
  let at = BINARY_HEADER_BYTES;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i] as Buffer;
    const value = fields[i + 1] as Buffer;
    if (name.includes(10) || value.includes(10)) continue;
    at += name.copy(frame, at);
    frame[at++] = 10;
    at += value.copy(frame, at);
    frame[at++] = 10;
  }
  if (body.length > 0) body.copy(frame, at);
  return frame;
}

/** Raw header fields as text pairs. */
function rawPairs(raw: RawHeaders): HeaderPairs {
  const out: HeaderPairs = [];
  if (Array.isArray(raw)) {
    for (let i = 0; i + 1 < raw.length; i += 2) out.push([String(raw[i]), String(raw[i + 1])]);
  } else {
    for (const [name, value] of Object.entries(raw)) {
      if (value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) out.push([name, String(v)]);
    }
  }
  return out;
}

/** name LF value LF … as pairs; undefined when the fields do not pair up. */
function metaPairs(fields: string[], from: number): HeaderPairs | undefined {
  // fields ends with the empty string after the last LF.
  if ((fields.length - 1 - from) % 2 !== 0 || fields[fields.length - 1] !== '') return undefined;
  const out: HeaderPairs = [];
  for (let i = from; i + 1 < fields.length; i += 2) out.push([fields[i] ?? '', fields[i + 1] ?? '']);
  return out;
}

export function decodeBinaryFrame(data: Buffer): Frame {
  if (data.length < BINARY_HEADER_BYTES) throw new FrameError('frame too short');
  const type = data.readUInt8(0);
  const id = data.readUInt32BE(1);
  const n = data.readUInt32BE(5);
  const metaLength = data.readUInt32BE(9);
  if (metaLength > MAX_HEADER_BYTES || BINARY_HEADER_BYTES + metaLength > data.length) {
    throw new FrameError('bad header length');
  }
  const meta =
    metaLength > 0 ? data.toString('utf8', BINARY_HEADER_BYTES, BINARY_HEADER_BYTES + metaLength) : '';
  const body = data.subarray(BINARY_HEADER_BYTES + metaLength);
  if (type === FRAME_HELLO) {
    let hello: unknown;
    try {
      hello = { ...JSON.parse(meta), type: 'hello' };
    } catch {
      throw new FrameError('hello is not JSON');
    }
    if (!isFrameHeader(hello)) throw new FrameError('malformed hello');
    return { header: hello, body: EMPTY };
  }
  if (id === 0) throw new FrameError('request id 0');
  switch (type) {
    case FRAME_REQUEST: {
      const fields = meta.split('\n');
      const headers = fields.length >= 3 ? metaPairs(fields, 2) : undefined;
      const method = fields[0] ?? '';
      const path = fields[1] ?? '';
      if (!headers || !TOKEN.test(method) || !path.startsWith('/')) throw new FrameError('malformed request');
      return { header: { type: 'request', id, method, path, headers, timeout_ms: n }, body };
    }
    case FRAME_RESPONSE: {
      const headers = metaLength === 0 ? [] : metaPairs(meta.split('\n'), 0);
      if (!headers) throw new FrameError('malformed response');
      return { header: { type: 'response', id, status: n, headers }, body };
    }
    case FRAME_ERROR:
      return { header: { type: 'error', id, message: meta }, body: EMPTY };
    case FRAME_CANCEL:
      return { header: { type: 'cancel', id }, body: EMPTY };
    default:
      throw new FrameError(`unknown frame type ${type}`);
  }
}

/**
 * A request or response with its header fields as one flat [name, value, …] list: what the relay
 * and the client read on every request (no array per field, no second pass to flatten). Any other
 * frame is given as decoded by its codec.
 */
export type FlatFrame =
  | {
      type: 'request';
      id: number;
      method: string;
      path: string;
      fields: string[];
      timeoutMs: number;
      body: Buffer;
    }
  | { type: 'response'; id: number; status: number; fields: string[]; body: Buffer }
  | { type: 'other'; frame: Frame };

/**
 * Decodes a frame like codec.decode (same validation, same FrameError), a version 2 request or
 * response straight into a FlatFrame: the meta is cut at its line feeds, never split into pairs.
 */
export function decodeFlat(codec: Codec, data: Buffer): FlatFrame {
  const type = data.length >= BINARY_HEADER_BYTES ? data[0] : 0;
  if (codec.version !== PROTOCOL_V2 || (type !== FRAME_REQUEST && type !== FRAME_RESPONSE)) {
    const frame = codec.decode(data);
    const header = frame.header;
    if (header.type === 'request') {
      return {
        type: 'request',
        id: header.id,
        method: header.method,
        path: header.path,
        fields: header.headers.flat(),
        timeoutMs: header.timeout_ms,
        body: frame.body,
      };
    }
    if (header.type === 'response') {
      return {
        type: 'response',
        id: header.id,
        status: header.status,
        fields: header.headers.flat(),
        body: frame.body,
      };
    }
    return { type: 'other', frame };
  }
  const id = data.readUInt32BE(1);
  const n = data.readUInt32BE(5);
  const metaLength = data.readUInt32BE(9);
  if (metaLength > MAX_HEADER_BYTES || BINARY_HEADER_BYTES + metaLength > data.length) {
    throw new FrameError('bad header length');
  }
  if (id === 0) throw new FrameError('request id 0');
  const meta =
    metaLength > 0 ? data.toString('utf8', BINARY_HEADER_BYTES, BINARY_HEADER_BYTES + metaLength) : '';
  const body = data.subarray(BINARY_HEADER_BYTES + metaLength);
  const fields: string[] = [];
  if (type === FRAME_RESPONSE) {
    if (!cutFields(meta, 0, fields)) throw new FrameError('malformed response');
    return { type: 'response', id, status: n, fields, body };
  }
  const methodEnd = meta.indexOf('\n');
  const pathEnd = methodEnd < 0 ? -1 : meta.indexOf('\n', methodEnd + 1);
  const method = methodEnd < 0 ? '' : meta.slice(0, methodEnd);
  const path = pathEnd < 0 ? '' : meta.slice(methodEnd + 1, pathEnd);
  if (pathEnd < 0 || !cutFields(meta, pathEnd + 1, fields) || !TOKEN.test(method) || !path.startsWith('/')) {
    throw new FrameError('malformed request');
  }
  return { type: 'request', id, method, path, fields, timeoutMs: n, body };
}

/** Appends the LF-ended fields of meta from `at` on to `out`; false when they do not pair up. */
function cutFields(meta: string, at: number, out: string[]): boolean {
  while (at < meta.length) {
    const end = meta.indexOf('\n', at);
    if (end < 0) return false;
    out.push(meta.slice(at, end));
    at = end + 1;
  }
  return out.length % 2 === 0;
}

/**
 * Keeps only the forwardable fields of a flat [name, value, …] list, in place (see
 * forwardableHeaders); returns the list.
 */
export function keepForwardable(fields: string[]): string[] {
  let kept = 0;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i] as string;
    const value = fields[i + 1] as string;
    if (!forwardable(name, value)) continue;
    fields[kept++] = name;
    fields[kept++] = value;
  }
  fields.length = kept;
  return fields;
}

/**
 * A request frame from header fields given as a flat [name, value, …] list (which must already be
 * forwardable): the same frame as codec.encode of the pairs, without making them.
 */
export function encodeRequest(
  codec: Codec,
  id: number,
  method: string,
  path: string,
  fields: string[],
  timeoutMs: number,
  body: Buffer,
): Buffer {
  if (codec.version !== PROTOCOL_V2) {
    const headers: HeaderPairs = [];
    for (let i = 0; i + 1 < fields.length; i += 2)
      headers.push([fields[i] as string, fields[i + 1] as string]);
    return codec.encode({ type: 'request', id, method, path, headers, timeout_ms: timeoutMs }, body);
  }
  if (method.includes('\n') || path.includes('\n')) {
    throw new FrameError('method and path cannot contain a line feed');
  }
  let meta = `${method}\n${path}\n`;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i] as string;
    const value = fields[i + 1] as string;
    if (name.includes('\n') || value.includes('\n')) continue;
    meta += `${name}\n${value}\n`;
  }
  return binaryFrame(FRAME_REQUEST, id, Math.min(Math.max(0, Math.floor(timeoutMs)), MAX_ID), meta, body);
}

export const binaryCodec: Codec = {
  version: PROTOCOL_V2,
  encode: encodeBinaryFrame,
  decode: decodeBinaryFrame,
};

/** The relay's codec for a connection, by the subprotocol the handshake settled on. */
export function codecForSubprotocol(protocol: string): Codec {
  return protocol === SUBPROTOCOL_V2 ? binaryCodec : jsonCodec;
}

/**
 * The client's codec for a connection, by the relay's first frame (the hello): a version 1 frame
 * starts with the high byte of its JSON length, always 0; a version 2 frame with its type, never 0.
 * (A relay from before version 2 may echo the offered subprotocol without speaking it.)
 */
export function codecForHello(data: Buffer): Codec {
  return data.length > 0 && data[0] !== 0 ? binaryCodec : jsonCodec;
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

function forwardable(name: string, value: string): boolean {
  return forwardableName(name) && FIELD_VALUE.test(value);
}

/** Verdicts on header names seen (the same few dozen on every request): at most 512 remembered. */
const nameVerdicts = new Map<string, boolean>();

/** A valid field name that is not hop-by-hop (pure, so remembered: no lower-casing and regex per field). */
function forwardableName(name: string): boolean {
  let verdict = nameVerdicts.get(name);
  if (verdict === undefined) {
    verdict = !HOP_BY_HOP.has(name.toLowerCase()) && TOKEN.test(name);
    if (nameVerdicts.size >= 512) nameVerdicts.clear();
    nameVerdicts.set(name, verdict);
  }
  return verdict;
}

/** Header pairs fit to forward: valid names and values, hop-by-hop and length headers dropped. */
export function forwardableHeaders(pairs: Iterable<[string, string]>): HeaderPairs {
  const out: HeaderPairs = [];
  for (const [name, value] of pairs) {
    if (forwardable(name, value)) out.push([name, value]);
  }
  return out;
}

/**
 * The forwardable header fields of a request arriving over HTTP, from Node's rawHeaders
 * ([k1, v1, …]) in one pass, as a flat [name, value, …] list, without the X-Forwarded-* fields
 * (the relay sets its own).
 */
export function requestFieldsFromRaw(raw: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] ?? '';
    const value = raw[i + 1] ?? '';
    if (name.length > 12 && name.slice(0, 12).toLowerCase() === 'x-forwarded-') continue;
    if (forwardable(name, value)) out.push(name, value);
  }
  return out;
}

/**
 * The first value of a header field (lower-case name) in Node's rawHeaders, as req.headers has it
 * for Host and Content-Length (later duplicates dropped); without building req.headers.
 */
export function rawHeader(raw: string[], name: string): string | undefined {
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const field = raw[i] as string;
    if (field.length === name.length && (field === name || field.toLowerCase() === name)) return raw[i + 1];
  }
  return undefined;
}

/** Node's rawHeaders ([k1, v1, k2, v2, …]) as pairs. */
export function pairsFromRaw(raw: string[]): HeaderPairs {
  const out: HeaderPairs = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i] ?? '', raw[i + 1] ?? '']);
  return out;
}
