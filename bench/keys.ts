// Benchmark keys and values: 64-byte keys `kvs-bench/<area>/<zero-padded index>` (so byte
// order is index order and a key range is an index range) and 256-byte random values.
import { randomBytes, randomUUID } from 'node:crypto';
import { prefixRangeEnd } from '../shared/bytes.js';

export const KEY_BYTES = 64;
export const VALUE_BYTES = 256;
export const ROOT_PREFIX = 'kvs-bench/';

/** Where the preloaded data set lives. */
export const DATA_AREA = 'data';

export function prefix(area: string): string {
  return `${ROOT_PREFIX}${area}/`;
}

export function key(area: string, index: number): Buffer {
  const p = prefix(area);
  return Buffer.from(p + String(index).padStart(KEY_BYTES - p.length, '0'), 'latin1');
}

/** The first key after every key that starts with `p` (etcd's prefix range end). */
export function prefixEnd(p: string): Buffer {
  return prefixRangeEnd(Buffer.from(p, 'latin1'));
}

export function value(bytes = VALUE_BYTES): Buffer {
  return randomBytes(bytes);
}

export function randomIndex(n: number): number {
  return Math.floor(Math.random() * n);
}

/** Where the Kubernetes-like data set (size-json) lives: kube-apiserver's key layout. */
export const JSON_PREFIX = '/registry/configmaps/default/';

/** The key of ConfigMap `i` of the Kubernetes-like data set (about 36 bytes). */
export function jsonKey(i: number): Buffer {
  return Buffer.from(`${JSON_PREFIX}cm-${i.toString(36)}`);
}

/**
 * ConfigMap `i` as a JSON object of about 255 bytes, as Kubernetes stores JSON objects (custom
 * resources; built-in kinds are protobuf): its metadata with a random uid, a resource version,
 * a creation timestamp and a label, and its data.
 */
export function jsonValue(i: number): Buffer {
  const o = {
    kind: 'ConfigMap',
    apiVersion: 'v1',
    metadata: {
      name: `cm-${i.toString(36)}`,
      namespace: 'default',
      uid: randomUUID(),
      resourceVersion: String(100000 + i),
      creationTimestamp: new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString(),
      labels: { app: 'web' },
    },
    data: { mode: 'on' },
  };
  return Buffer.from(JSON.stringify(o));
}
