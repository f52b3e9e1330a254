import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, type LookupFunction } from 'node:net';

// Server-side request forgery guard. A callback URL is chosen by whoever registers
// a bot, so without this check a delivery could reach the service's own network: loopback, private
// ranges, link-local cloud metadata (169.254.169.254) and so on. The check runs at delivery time on
// the addresses DNS returns *now*, inside the socket's own lookup, so the connection goes to exactly
// the address that was checked: a DNS answer that changes between check and connect (rebinding)
// cannot slip through.

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a hostname to every address (the edge of the world; tests may inject their own). */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (hostname) => {
  const found = await dnsLookup(hostname, { all: true, verbatim: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

export const REFUSED_PREFIX = 'refused to connect to ';

export class ForbiddenTargetError extends Error {
  readonly code = 'ESSRF';
  constructor(
    readonly address: string,
    reason: string,
  ) {
    super(`${REFUSED_PREFIX}${address} (${reason}); set ALLOW_PRIVATE_WEBHOOK_TARGETS=true to allow`);
    this.name = 'ForbiddenTargetError';
  }
}

// [first address as 32-bit number, prefix length, reason]
const IPV4_RANGES: ReadonlyArray<[string, number, string]> = [
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'carrier-grade NAT'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local / metadata'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignments'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved / broadcast'],
];

function ipv4ToNumber(ip: string): number {
  return ip.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
}

function ipv4Reason(ip: string): string | null {
  const n = ipv4ToNumber(ip);
  for (const [base, prefix, reason] of IPV4_RANGES) {
    const size = 2 ** (32 - prefix);
    const start = ipv4ToNumber(base);
    if (n >= start && n < start + size) return reason;
  }
  return null;
}

/** Eight 16-bit groups of an IPv6 address (handles `::` and a trailing dotted IPv4 part). */
export function ipv6Groups(ip: string): number[] {
  let text = ip.toLowerCase();
  const zone = text.indexOf('%');
  if (zone >= 0) text = text.slice(0, zone);
  const lastColon = text.lastIndexOf(':');
  const last = text.slice(lastColon + 1);
  if (last.includes('.')) {
    const n = ipv4ToNumber(last);
    text = `${text.slice(0, lastColon + 1)}${Math.floor(n / 65536).toString(16)}:${(n % 65536).toString(16)}`;
  }
  const parse = (s: string) => (s === '' ? [] : s.split(':').map((p) => parseInt(p, 16)));
  const gap = text.indexOf('::');
  if (gap < 0) return parse(text);
  const head = parse(text.slice(0, gap));
  const rest = parse(text.slice(gap + 2));
  return [...head, ...Array<number>(Math.max(0, 8 - head.length - rest.length)).fill(0), ...rest];
}

type EightGroups = [number, number, number, number, number, number, number, number];

/** The eight 16-bit groups of a parsed IPv6 address, or null for any other count. */
function eightGroups(groups: number[]): EightGroups | null {
  return groups.length === 8 ? (groups as EightGroups) : null;
}

function ipv6Reason(ip: string): string | null {
  const g = eightGroups(ipv6Groups(ip));
  if (!g) return 'unparseable';
  const embeddedV4 = () => `${g[6] >> 8}.${g[6] & 255}.${g[7] >> 8}.${g[7] & 255}`;
  const firstFiveZero = g.slice(0, 5).every((x) => x === 0);
  if (g.every((x) => x === 0)) return 'unspecified';
  if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return 'loopback';
  // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) carry
  // an IPv4 address that the operating system may reach directly: judge that address.
  if (firstFiveZero && (g[5] === 0xffff || g[5] === 0)) {
    const reason = ipv4Reason(embeddedV4());
    return reason ? `IPv4-embedded ${reason}` : null;
  }
  // IPv4-translated (::ffff:0:a.b.c.d, RFC 2765).
  if (g.slice(0, 4).every((x) => x === 0) && g[4] === 0xffff && g[5] === 0) {
    const reason = ipv4Reason(embeddedV4());
    return reason ? `IPv4-embedded ${reason}` : null;
  }
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) {
    const reason = ipv4Reason(embeddedV4());
    return reason ? `NAT64 ${reason}` : null;
  }
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  // 6to4 (2002:AABB:CCDD::/48) routes to the IPv4 address in its second and third groups.
  if (g[0] === 0x2002) {
    const reason = ipv4Reason(v4(g[1], g[2]));
    return reason ? `6to4 ${reason}` : null;
  }
  // Teredo (2001:0::/32): the server's IPv4 in groups 2–3, the client's inverted in groups 6–7.
  if (g[0] === 0x2001 && g[1] === 0) {
    const reason = ipv4Reason(v4(g[2], g[3])) ?? ipv4Reason(v4(g[6] ^ 0xffff, g[7] ^ 0xffff));
    return reason ? `Teredo ${reason}` : null;
  }
  const first = g[0];
  if ((first & 0xfe00) === 0xfc00) return 'unique-local';
  if ((first & 0xffc0) === 0xfe80) return 'link-local';
  if ((first & 0xffc0) === 0xfec0) return 'site-local';
  if ((first & 0xff00) === 0xff00) return 'multicast';
  if (first === 0x2001 && g[1] === 0x0db8) return 'documentation';
  return null;
}

/** Why an address must not be a webhook target, or null when it is a public unicast address. */
export function forbiddenReason(address: string): string | null {
  const family = isIP(address);
  if (family === 4) return ipv4Reason(address);
  if (family === 6) return ipv6Reason(address);
  return 'not an IP address';
}

/** Throws ForbiddenTargetError when a literal IP host is not allowed (sockets skip lookup for those). */
export function assertLiteralAllowed(host: string): void {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (isIP(bare) === 0) return;
  const reason = forbiddenReason(bare);
  if (reason) throw new ForbiddenTargetError(bare, reason);
}

/**
 * A socket `lookup` that resolves, refuses the whole answer when any address is forbidden (a mixed
 * answer is a classic bypass), and otherwise hands the checked addresses to the socket.
 */
export function guardedLookup(resolve: Resolver): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname).then(
      (addresses) => {
        const wanted = options.family === 4 || options.family === 6 ? options.family : 0;
        const usable = addresses.filter((a) => wanted === 0 || a.family === wanted);
        for (const a of usable) {
          const reason = forbiddenReason(a.address);
          if (reason) {
            callback(
              new ForbiddenTargetError(a.address, `${hostname} resolves to a ${reason} address`),
              '',
              4,
            );
            return;
          }
        }
        const first = usable[0];
        if (!first) {
          const error = Object.assign(new Error(`no address found for ${hostname}`), { code: 'ENOTFOUND' });
          callback(error, '', 4);
          return;
        }
        if (options.all) {
          (callback as unknown as (e: null, a: ResolvedAddress[]) => void)(null, usable);
        } else {
          callback(null, first.address, first.family);
        }
      },
      (error: unknown) => callback(error as NodeJS.ErrnoException, '', 4),
    );
  };
}
