import proxyaddr from 'proxy-addr';

/**
 * The trust function of TRUST_PROXY (src/config.ts) for Fastify and the tunnel relay alike: which
 * hops of X-Forwarded-For may be believed. `hop` 0 is the socket's peer, 1 the address it
 * appended, and so on; the client address is the first one not trusted.
 */
export function trustFunction(setting: false | number | string[]): (addr: string, hop: number) => boolean {
  if (setting === false) return () => false;
  if (typeof setting === 'number') return (_addr, hop) => hop < setting;
  return proxyaddr.compile(setting);
}
