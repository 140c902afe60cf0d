// Pure conversions between the embedding API's shapes and the storage protocol's: etcd request
// messages (what `kvs run`'s gateway forwards to the engine), their encoded responses, and
// stored mvccpb.KeyValue records.
import { encode, decode, num, bigint, int64 } from '../shared/proto/index.js';
import { decodeKeyValue } from '../shared/mvcc/keyvalue.js';
import { prefixRangeEnd } from '../shared/bytes.js';
import type { TxnShape } from '../shared/mvcc/write-kind.js';
import type { Bytes } from './options.js';
import type { Compare, KeyValue, Lease, TxnOp, TxnOpResult, TxnResult } from './types.js';

const EMPTY = Buffer.alloc(0);

/** A key or value as bytes: a string is its UTF-8 encoding; bytes are used as they are (no copy). */
export function toBytes(b: Bytes, what = 'key'): Buffer {
  if (typeof b === 'string') return Buffer.from(b, 'utf8');
  if (b instanceof Uint8Array) return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  throw new TypeError(`${what} must be a string or a Uint8Array, got ${b === null ? 'null' : typeof b}`);
}

/** [key, rangeEnd] of a key alone (rangeEnd empty) or of every key starting with it (etcd's prefix range; '' is every key). */
export function rangeOf(key: Buffer, prefix: boolean): [Buffer, Buffer] {
  if (!prefix) return [key, EMPTY];
  if (key.length === 0) return [Buffer.from([0]), Buffer.from([0])];
  return [key, prefixRangeEnd(key)];
}

export function leaseId(lease: bigint | Lease | undefined): bigint {
  if (lease === undefined) return 0n;
  if (typeof lease === 'bigint') return lease;
  if (typeof lease === 'object' && lease !== null && typeof lease.id === 'bigint') return lease.id;
  throw new TypeError('lease must be a bigint lease id or the Lease grantLease() returned');
}

/** A stored record (or protobufjs's decoded KeyValue) as the API's KeyValue; the bytes are copied out of LMDB's memory. */
export function keyValueOf(record: Uint8Array): KeyValue {
  const kv = decodeKeyValue(record);
  return {
    key: Buffer.from(kv.key),
    value: Buffer.from(kv.value),
    createRevision: kv.createRevision,
    modRevision: kv.modRevision,
    version: kv.version,
    lease: kv.lease,
  };
}

interface DecodedKv {
  key?: Uint8Array;
  value?: Uint8Array;
  createRevision?: unknown;
  modRevision?: unknown;
  version?: unknown;
  lease?: unknown;
}
type Int = Parameters<typeof num>[0];

function fromDecoded(kv: DecodedKv): KeyValue {
  return {
    key: Buffer.from(kv.key ?? EMPTY),
    value: Buffer.from(kv.value ?? EMPTY),
    createRevision: num(kv.createRevision as Int),
    modRevision: num(kv.modRevision as Int),
    version: num(kv.version as Int),
    lease: bigint(kv.lease as Int),
  };
}

// ---- requests -------------------------------------------------------------------------------

export function putRequest(key: Buffer, value: Buffer, lease: bigint): Buffer {
  return encode('etcdserverpb.PutRequest', { key, value, lease: lease ? int64(lease) : 0 });
}

export function deleteRequest(key: Buffer, rangeEnd: Buffer = EMPTY): Buffer {
  return encode('etcdserverpb.DeleteRangeRequest', { key, rangeEnd });
}

export function compactRequest(revision: number, physical: boolean): Buffer {
  return encode('etcdserverpb.CompactionRequest', { revision, physical });
}

export function leaseGrantRequest(ttl: number): Buffer {
  return encode('etcdserverpb.LeaseGrantRequest', { TTL: ttl, ID: 0 });
}

export function leaseIdRequest(id: bigint): Buffer {
  return encode('etcdserverpb.LeaseRevokeRequest', { ID: int64(id) });
}

export function leaseTimeToLiveRequest(id: bigint): Buffer {
  return encode('etcdserverpb.LeaseTimeToLiveRequest', { ID: int64(id), keys: true });
}

// etcdserverpb.Compare's enums
const RESULT = { '==': 0, '>': 1, '<': 2, '!=': 3 } as const;
const TARGET = { version: 0, createRevision: 1, modRevision: 2, value: 3, lease: 4 } as const;

function compareMessage(c: Compare): object {
  const key = toBytes(c.key);
  const result = RESULT[c.op];
  if (result === undefined) throw new TypeError(`txn compare op must be one of ==, !=, <, >, got ${String(c.op)}`);
  const target = TARGET[c.target];
  if (target === undefined) throw new TypeError(`txn compare target must be one of modRevision, createRevision, version, value, lease, got ${String(c.target)}`);
  switch (c.target) {
    case 'value':
      return { key, result, target, value: toBytes(c.value, 'compared value') };
    case 'lease':
      return { key, result, target, lease: int64(c.value) };
    default:
      return { key, result, target, [c.target]: c.value };
  }
}

function opMessage(op: TxnOp): object {
  if ('put' in op) return { requestPut: { key: toBytes(op.put), value: toBytes(op.value, 'value'), lease: int64(leaseId(op.lease)) } };
  if ('delete' in op) {
    const [key, rangeEnd] = rangeOf(toBytes(op.delete), op.prefix === true);
    return { requestDeleteRange: { key, rangeEnd } };
  }
  if ('get' in op) {
    const [key, rangeEnd] = rangeOf(toBytes(op.get), op.prefix === true);
    return { requestRange: { key, rangeEnd, limit: op.limit ?? 0 } };
  }
  throw new TypeError('a txn operation is { put, value }, { delete } or { get }');
}

/** An etcdserverpb.TxnRequest, as protobufjs encodes it (and classifyTxn reads it). */
export function txnMessage(compare: readonly Compare[], success: readonly TxnOp[], failure: readonly TxnOp[]): TxnShape {
  return { compare: compare.map(compareMessage), success: success.map(opMessage), failure: failure.map(opMessage) } as TxnShape;
}

export function encodeTxn(message: TxnShape): Buffer {
  return encode('etcdserverpb.TxnRequest', message);
}

// ---- responses ------------------------------------------------------------------------------

interface WithHeader {
  header?: { revision?: Int };
}

/** The header revision of an encoded response of `type`. */
export function revisionOf(type: string, body: Uint8Array): number {
  return num(decode<WithHeader>(type, body).header?.revision);
}

export function deleteResult(body: Uint8Array): { revision: number; deleted: number } {
  const r = decode<WithHeader & { deleted?: Int }>('etcdserverpb.DeleteRangeResponse', body);
  return { revision: num(r.header?.revision), deleted: num(r.deleted) };
}

interface DecodedRange {
  kvs?: DecodedKv[];
  more?: boolean;
  count?: Int;
}
interface DecodedTxn extends WithHeader {
  succeeded?: boolean;
  responses?: { responsePut?: WithHeader; responseDeleteRange?: { deleted?: Int }; responseRange?: DecodedRange }[];
}

export function txnResult(body: Uint8Array): TxnResult {
  const r = decode<DecodedTxn>('etcdserverpb.TxnResponse', body);
  const revision = num(r.header?.revision);
  const results = (r.responses ?? []).map((op): TxnOpResult => {
    if (op.responsePut) return { type: 'put', revision };
    if (op.responseDeleteRange) return { type: 'delete', deleted: num(op.responseDeleteRange.deleted) };
    const range = op.responseRange ?? {};
    return { type: 'get', kvs: (range.kvs ?? []).map(fromDecoded), more: range.more === true, count: num(range.count) };
  });
  return { succeeded: r.succeeded === true, revision, results };
}

export function leaseGrantResult(body: Uint8Array): Lease {
  const r = decode<{ ID?: Int; TTL?: Int }>('etcdserverpb.LeaseGrantResponse', body);
  return { id: bigint(r.ID), ttl: num(r.TTL) };
}

export function leaseKeepAliveTtl(body: Uint8Array): number {
  return num(decode<{ TTL?: Int }>('etcdserverpb.LeaseKeepAliveResponse', body).TTL);
}

export function leaseTimeToLiveResult(body: Uint8Array): { id: bigint; ttl: number; grantedTtl: number; keys: Buffer[] } {
  const r = decode<{ ID?: Int; TTL?: Int; grantedTTL?: Int; keys?: Uint8Array[] }>('etcdserverpb.LeaseTimeToLiveResponse', body);
  return { id: bigint(r.ID), ttl: num(r.TTL), grantedTtl: num(r.grantedTTL), keys: (r.keys ?? []).map((k) => Buffer.from(k)) };
}
