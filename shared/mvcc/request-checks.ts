/**
 * etcd's request validation (v3rpc/key.go: checkPutRequest, checkTxnRequest, checkIntervals).
 * The gateway runs it before a request is forwarded, so a bad request gets etcd's error
 * without a round trip; the storage's executor runs it again as an invariant of what it
 * applies (a write reaches it from the gateway, from the peer and from its own replays).
 */
import { MAX_KEY_BYTES } from './schema.js';
import { Errors, MAX_TXN_OPS } from '../errors.js';
import { bigint } from '../proto/index.js';
import type { PutRequest, RequestOp, TxnRequest } from './requests.js';
import { asBuffer as buf } from '../bytes.js';

function checkKey(key: Uint8Array): void {
  if (key.length === 0) throw Errors.emptyKey;
  if (key.length > MAX_KEY_BYTES) throw Errors.keyTooLong(MAX_KEY_BYTES);
}

export function checkPutRequest(r: PutRequest): void {
  checkKey(r.key);
  if (r.ignoreValue && r.value.length !== 0) throw Errors.valueProvided;
  if (r.ignoreLease && bigint(r.lease) !== 0n) throw Errors.leaseProvided;
}

function checkRequestOp(op: RequestOp, maxOps: number): void {
  if (op.requestRange) { if (op.requestRange.key.length === 0) throw Errors.emptyKey; return; }
  if (op.requestPut) return checkPutRequest(op.requestPut);
  if (op.requestDeleteRange) { if (op.requestDeleteRange.key.length === 0) throw Errors.emptyKey; return; }
  if (op.requestTxn) return checkTxnRequest(op.requestTxn, maxOps);
  throw Errors.keyNotFound; // an empty RequestOp
}

export function checkTxnRequest(r: TxnRequest, maxOps = MAX_TXN_OPS): void {
  const opc = Math.max(r.compare.length, r.success.length, r.failure.length);
  if (opc > maxOps) throw Errors.tooManyOps;
  for (const c of r.compare) if (c.key.length === 0) throw Errors.emptyKey;
  for (const op of r.success) checkRequestOp(op, maxOps - opc);
  for (const op of r.failure) checkRequestOp(op, maxOps - opc);
}

/** [begin, end) byte intervals; a point k is [k, k+"\0"). */
type Interval = [Buffer, Buffer];
const intersectsPoint = (dels: Interval[], k: Buffer) => dels.some(([b, e]) => Buffer.compare(b, k) <= 0 && Buffer.compare(k, e) < 0);

/** etcd's checkIntervals: no key may be put twice, or put and deleted, in one txn path. */
export function checkIntervals(ops: RequestOp[]): { puts: Set<string>; dels: Interval[] } {
  const dels: Interval[] = [];
  for (const op of ops) {
    const d = op.requestDeleteRange;
    if (!d) continue;
    const key = buf(d.key);
    dels.push([key, d.rangeEnd.length ? buf(d.rangeEnd) : Buffer.concat([key, Buffer.from([0])])]);
  }
  const puts = new Set<string>();
  for (const op of ops) {
    const t = op.requestTxn;
    if (!t) continue;
    const then = checkIntervals(t.success);
    const other = checkIntervals(t.failure);
    for (const k of then.puts) {
      if (puts.has(k) || intersectsPoint(dels, Buffer.from(k, 'latin1'))) throw Errors.duplicateKey;
      puts.add(k);
    }
    for (const k of other.puts) {
      if (puts.has(k) && !then.puts.has(k)) throw Errors.duplicateKey;
      if (intersectsPoint(dels, Buffer.from(k, 'latin1'))) throw Errors.duplicateKey;
      puts.add(k);
    }
    dels.push(...then.dels, ...other.dels);
  }
  for (const op of ops) {
    const p = op.requestPut;
    if (!p) continue;
    const k = buf(p.key).toString('latin1');
    if (puts.has(k) || intersectsPoint(dels, buf(p.key))) throw Errors.duplicateKey;
    puts.add(k);
  }
  return { puts, dels };
}
