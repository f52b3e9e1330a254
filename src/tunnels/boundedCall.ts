import type { Dispatcher } from 'undici';

/**
 * The common part of the tunnels' undici dispatch handlers (the tunnel client's request to the local
 * receiver, and an instance's hand-over to the instance holding a tunnel). They use the handler
 * interface undici's own requests use (onConnect, onHeaders, onData, onComplete, onError) rather
 * than the controller one, for which undici wraps each request in an adapter and a controller
 * object and parses header fields nobody reads.
 *
 * The body is read up to `limit` bytes: one byte more fails the request with `overLimit()` (onError)
 * and destroys its connection, so nothing more is read. The outcome is taken once: `finish` with the
 * body, or `fail`. A subclass reads the status and header fields in onHeaders.
 */
export abstract class BoundedCall implements Dispatcher.DispatchHandler {
  protected abortRequest: ((error?: Error) => void) | undefined;
  private chunks: Buffer[] = [];
  private size = 0;
  private settled = false;

  constructor(private readonly limit: number) {}

  abstract onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean;
  /** The error a body over the limit fails with. */
  protected abstract overLimit(): Error;
  protected abstract finish(body: Buffer): void;
  protected abstract fail(error: Error): void;

  onConnect(abort: (error?: Error) => void): void {
    this.abortRequest = abort;
  }

  onData(chunk: Buffer): boolean {
    this.size += chunk.length;
    if (this.size > this.limit) {
      this.abortRequest?.(this.overLimit());
      return true;
    }
    this.chunks.push(chunk);
    return true;
  }

  onComplete(): void {
    if (this.settled) return;
    this.settled = true;
    const chunks = this.chunks;
    this.chunks = [];
    const [first] = chunks;
    this.finish(chunks.length === 1 && first ? first : Buffer.concat(chunks));
  }

  onError(error: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.fail(error);
  }
}
