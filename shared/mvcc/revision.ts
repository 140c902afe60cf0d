// Revision keys: 8-byte big-endian main revision + 4-byte big-endian sub index, so LMDB's
// byte order is revision order (the `history` table's keys).
//
// A key's changes in `keyrevs` ("refs") are the revision key with every byte inverted, plus
// one event byte: LMDB sorts a key's duplicates in byte order, so the NEWEST change comes
// first, and a plain get of the key (LMDB returns the first duplicate) finds it.

export const REVKEY_BYTES = 12;
export const REF_BYTES = REVKEY_BYTES + 1;
export const EVENT_PUT = 0;
export const EVENT_DELETE = 1;

function writeRevKey(b: Buffer, main: number, sub: number): Buffer {
  b.writeUIntBE(0, 0, 2);
  b.writeUIntBE(main, 2, 6);
  b.writeUInt32BE(sub, 8);
  return b;
}

/** `into`: a buffer to reuse (a bulk writer's scratch), instead of a new one. */
export function revKey(main: number, sub: number, into: Buffer = Buffer.allocUnsafe(REVKEY_BYTES)): Buffer {
  return writeRevKey(into, main, sub);
}

export function mainOf(revkey: Uint8Array): number {
  return (revkey[2] * 2 ** 40) + (revkey[3] * 2 ** 32) + ((revkey[4] << 24) >>> 0) + (revkey[5] << 16) + (revkey[6] << 8) + revkey[7];
}

export function subOf(revkey: Uint8Array): number {
  return ((revkey[8] << 24) >>> 0) + (revkey[9] << 16) + (revkey[10] << 8) + revkey[11];
}

/** The keyrevs value of a change: inverted revision key + event. */
export function keyRevValue(main: number, sub: number, event: number, into: Buffer = Buffer.allocUnsafe(REF_BYTES)): Buffer {
  const b = writeRevKey(into, main, sub);
  for (let i = 0; i < REVKEY_BYTES; i++) b[i] ^= 0xff;
  b[REVKEY_BYTES] = event;
  return b;
}

/** The main revision of a ref. */
export function refMain(ref: Uint8Array): number {
  return (
    ((ref[2] ^ 0xff) * 2 ** 40) + ((ref[3] ^ 0xff) * 2 ** 32) + ((((ref[4] ^ 0xff) << 24) >>> 0)) +
    ((ref[5] ^ 0xff) << 16) + ((ref[6] ^ 0xff) << 8) + (ref[7] ^ 0xff)
  );
}

export function refIsPut(ref: Uint8Array): boolean {
  return ref[REVKEY_BYTES] === EVENT_PUT;
}

/** The history key a ref points at, written into `into` (a fresh buffer by default). */
export function refRevKey(ref: Uint8Array, into: Buffer = Buffer.allocUnsafe(REVKEY_BYTES)): Buffer {
  for (let i = 0; i < REVKEY_BYTES; i++) into[i] = ref[i] ^ 0xff;
  return into;
}
