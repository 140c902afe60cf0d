/** `b` as a Buffer over the same memory (protobufjs decodes bytes fields as Uint8Array in places): no copy. */
export function asBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.length);
}
