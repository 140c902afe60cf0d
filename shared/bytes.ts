/** `b` as a Buffer over the same memory (protobufjs decodes bytes fields as Uint8Array in places): no copy. */
export function asBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.length);
}

/**
 * The first key after every key that starts with `prefix`: the prefix with its last byte below
 * 0xff incremented and the rest dropped. Null when there is none (every byte is 0xff, or the
 * prefix is empty): the range is then every key at or after the prefix.
 */
export function prefixEnd(prefix: Uint8Array): Buffer | null {
  for (let i = prefix.length - 1; i >= 0; i--) {
    if (prefix[i]! < 0xff) {
      const end = Buffer.from(prefix.subarray(0, i + 1));
      end[i]!++;
      return end;
    }
  }
  return null;
}

/** etcd's GetPrefixRangeEnd: prefixEnd, or "\0" (every key) when there is none. */
export function prefixRangeEnd(prefix: Uint8Array): Buffer {
  return prefixEnd(prefix) ?? Buffer.from([0]);
}
