// What a write is, as clients mean it: the `op` label of the write metrics and the name of the
// write's span. Kubernetes (and kine) write through Txns of three fixed shapes:
//   create:  If(mod_revision(k) == 0)  Then(Put k)
//   update:  If(mod_revision(k) == R)  Then(Put k)            Else(Range k)
//   delete:  If(mod_revision(k) == R)  Then(DeleteRange k)    Else(Range k)
// Pure functions of the decoded request; storage (metrics) and the gateway (spans) share them.
import type protobuf from 'protobufjs';
import { num } from '../proto/index.js';

/** The span name is `kvs.<kind>`; the metric label is `metricOp(kind)`. */
export type WriteKind = 'put' | 'create' | 'update' | 'delete' | 'delete_if_revision' | 'txn' | 'compact';
export type MetricOp = 'put' | 'create' | 'update' | 'delete' | 'txn' | 'compact';
export const METRIC_OPS: readonly MetricOp[] = ['put', 'create', 'update', 'delete', 'txn', 'compact'];

type Int64 = number | protobuf.Long | null | undefined;
interface KeyOnly { key?: Uint8Array; rangeEnd?: Uint8Array }
export interface TxnShape {
  compare?: { result?: number; target?: number; key?: Uint8Array; rangeEnd?: Uint8Array; modRevision?: Int64 }[];
  success?: { requestRange?: KeyOnly; requestPut?: KeyOnly; requestDeleteRange?: KeyOnly; requestTxn?: unknown }[];
  failure?: { requestRange?: KeyOnly; requestPut?: KeyOnly; requestDeleteRange?: KeyOnly; requestTxn?: unknown }[];
}

// etcdserverpb.Compare enums
const EQUAL = 0;
const MOD = 2;

export interface Classified {
  kind: WriteKind;
  /** The key the write is about (its first key, for a DeleteRange or another Txn), for kvs.key_scope. */
  key?: Uint8Array;
}

/** A Txn of one of the three shapes above is that write; any other Txn is `txn`. */
export function classifyTxn(t: TxnShape): Classified {
  const cmp = t.compare ?? [];
  const success = t.success ?? [];
  const failure = t.failure ?? [];
  const other: Classified = { kind: 'txn', key: cmp[0]?.key ?? firstKey(success[0]) };
  if (cmp.length !== 1 || success.length !== 1 || failure.length > 1) return other;
  const c = cmp[0]!;
  const key = c.key;
  if (!key || (c.result ?? EQUAL) !== EQUAL || (c.target ?? 0) !== MOD || (c.rangeEnd?.length ?? 0) > 0) return other;
  if (failure.length === 1 && !isSingleKey(failure[0]!.requestRange, key)) return other;
  const op = success[0]!;
  const rev = num(c.modRevision);
  if (isSingleKey(op.requestPut, key)) return { kind: rev === 0 ? 'create' : 'update', key };
  if (rev !== 0 && isSingleKey(op.requestDeleteRange, key)) return { kind: 'delete_if_revision', key };
  return other;
}

/** The metric label of a kind: the spec's op values, with guarded deletes counted as deletes. */
export function metricOp(kind: WriteKind): MetricOp {
  return kind === 'delete_if_revision' ? 'delete' : kind;
}

/**
 * The first two path segments of a key, never the key itself: `/registry/pods/ns/name` →
 * `/registry/pods`. The last segment (the key's own name) is never included, so `/a/b` gives
 * `/a` and a key without `/` gives '' (no scope).
 */
export function keyScope(key: Uint8Array): string {
  const text = Buffer.from(key.buffer, key.byteOffset, key.byteLength).toString('utf8');
  const parts = text.split('/');
  parts.pop(); // the key's own name
  const lead = parts[0] === '' ? '/' : '';
  const segments = parts.filter((p) => p !== '').slice(0, 2);
  return segments.length ? lead + segments.join('/') : '';
}

function isSingleKey(r: KeyOnly | undefined, key: Uint8Array): boolean {
  return !!r && !!r.key && (r.rangeEnd?.length ?? 0) === 0 && Buffer.compare(r.key, key) === 0;
}

function firstKey(op: TxnShape['success'] extends (infer O)[] | undefined ? O | undefined : never): Uint8Array | undefined {
  return op?.requestPut?.key ?? op?.requestDeleteRange?.key ?? op?.requestRange?.key;
}

