// How the local object store (local.ts) names an object on disk. The key (store prefix + key)
// is split at `/`; each segment is percent-encoded (see `encodeSegment`), so no key can escape
// the bucket directory. Object files carry the encoded segment as their name, directories the
// encoded segment plus `~`, so `a` and `a/b` can both exist. Temporary files start with `.`,
// which no encoded segment does. Pure functions: the names, and the order S3 lists keys in.
import path from 'node:path';

export const DIR_SUFFIX = '~';
const MAX_KEY_BYTES = 1024; // as S3
const MAX_NAME_BYTES = 255; // a file name on Linux file systems

/**
 * One key segment as a file name: bytes outside [A-Za-z0-9_.-] become %XX, and so does a
 * leading `.` (so `.`, `..` and temp files cannot be produced); the empty segment is `%`.
 */
export function encodeSegment(seg: string): string {
  if (seg === '') return '%';
  let out = '';
  const bytes = Buffer.from(seg, 'utf8');
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    const c = String.fromCharCode(b);
    const plain = /[A-Za-z0-9_-]/.test(c) || (c === '.' && i > 0);
    out += plain ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

export function decodeSegment(name: string): string {
  if (name === '%') return '';
  const bytes: number[] = [];
  for (let i = 0; i < name.length; i++) {
    if (name[i] === '%') {
      bytes.push(parseInt(name.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(name.charCodeAt(i));
  }
  return Buffer.from(bytes).toString('utf8');
}

/** The path of a full key's object file, relative to the bucket directory. */
export function objectPath(fullKey: string): string {
  const size = Buffer.byteLength(fullKey, 'utf8');
  if (size === 0) throw new Error('object store: empty key');
  if (size > MAX_KEY_BYTES) throw new Error(`object store: key longer than ${MAX_KEY_BYTES} bytes: ${fullKey.slice(0, 80)}...`);
  const segs = fullKey.split('/');
  const names = segs.map((s, i) => encodeSegment(s) + (i < segs.length - 1 ? DIR_SUFFIX : ''));
  for (const n of names) {
    if (Buffer.byteLength(n) > MAX_NAME_BYTES) {
      throw new Error(`object store: a part of key ${fullKey.slice(0, 80)} is too long for a local directory store (${MAX_NAME_BYTES} bytes encoded)`);
    }
  }
  return path.join(...names);
}

/** Order of S3 listings: by the UTF-8 bytes of the key. */
export function compareUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** Whether every key starting with `prefix` sorts at or before `after`. */
export function endsBefore(prefix: string, after: Buffer): boolean {
  const p = Buffer.from(prefix, 'utf8');
  return Buffer.compare(p, after.subarray(0, p.length)) < 0;
}
