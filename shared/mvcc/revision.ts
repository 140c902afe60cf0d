// Revision keys: 8-byte big-endian main revision + 4-byte big-endian sub index, so LMDB's
// byte order is revision order. keyrevs values append one event byte.

export const REVKEY_BYTES = 12;
export const EVENT_PUT = 0;
export const EVENT_DELETE = 1;

function writeRevKey(b: Buffer, main: number, sub: number): Buffer {
  b.writeUIntBE(0, 0, 2);
  b.writeUIntBE(main, 2, 6);
  b.writeUInt32BE(sub, 8);
  return b;
}

export function revKey(main: number, sub: number): Buffer {
  return writeRevKey(Buffer.allocUnsafe(REVKEY_BYTES), main, sub);
}

export function keyRevValue(main: number, sub: number, event: number): Buffer {
  const b = writeRevKey(Buffer.allocUnsafe(REVKEY_BYTES + 1), main, sub);
  b[REVKEY_BYTES] = event;
  return b;
}

export function mainOf(revkey: Uint8Array): number {
  return (revkey[2] * 2 ** 40) + (revkey[3] * 2 ** 32) + ((revkey[4] << 24) >>> 0) + (revkey[5] << 16) + (revkey[6] << 8) + revkey[7];
}

export function subOf(revkey: Uint8Array): number {
  return ((revkey[8] << 24) >>> 0) + (revkey[9] << 16) + (revkey[10] << 8) + revkey[11];
}
