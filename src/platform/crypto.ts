import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  hash,
  hkdfSync,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto';

// Secrets that are only ever compared (API keys, owner tokens, claim tokens, tunnel tokens) are
// stored as SHA-256 hashes. Short secrets that could be brute-forced from a hash (6-digit pairing
// codes) use an HMAC keyed with SECRET_KEY. Secrets that must be used again (webhook secrets, hooks
// tokens, card digits) are encrypted with AES-256-GCM under a key derived from SECRET_KEY.

export function randomHex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}

export function sha256Hex(value: string): string {
  // The one-shot form: about a third of createHash's cost (every bot request hashes its key).
  return hash('sha256', value, 'hex');
}

export function constantTimeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export interface SecretBox {
  encrypt(plaintext: string): string;
  decrypt(ciphertext: string): string;
  /** Keyed hash for low-entropy secrets. */
  keyedHash(value: string): string;
  /** Signs a short message (one-click links, CSRF tokens). */
  sign(message: string): string;
}

export function createSecretBox(secretKey: string): SecretBox {
  const ikm = Buffer.from(secretKey, 'utf8');
  const encKey = Buffer.from(hkdfSync('sha256', ikm, Buffer.alloc(0), 'botpay:aes-256-gcm:v1', 32));
  const macKey = Buffer.from(hkdfSync('sha256', ikm, Buffer.alloc(0), 'botpay:hmac:v1', 32));
  return {
    encrypt(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', encKey, iv);
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return `v1.${iv.toString('base64url')}.${body.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}`;
    },
    decrypt(ciphertext) {
      const [version, iv, body, tag] = ciphertext.split('.');
      if (version !== 'v1' || !iv || body === undefined || !tag) throw new Error('unrecognised ciphertext');
      const decipher = createDecipheriv('aes-256-gcm', encKey, Buffer.from(iv, 'base64url'));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString(
        'utf8',
      );
    },
    keyedHash(value) {
      return createHmac('sha256', macKey).update(`hash:${value}`).digest('hex');
    },
    sign(message) {
      return createHmac('sha256', macKey).update(`sign:${message}`).digest('base64url');
    },
  };
}
