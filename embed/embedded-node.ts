// The Node (node.ts) of open(): writes are the storage protocol's requests
// (shared/storage/ops.ts, etcd's messages) handed to the host's write route, the same path
// `kvs run`'s gateway sends them on; reads go to LMDB in this process (reads.ts); watches to
// the commit feed and history (watch.ts). node.ts documents each operation.
import type { Registry } from 'prom-client';
import { Op } from '../shared/storage/ops.js';
import { classifyTxn } from '../shared/mvcc/write-kind.js';
import * as M from '../shared/metrics.js';
import type { Host } from './host.js';
import type { Spans, ReadKind } from './spans.js';
import type { Bytes, ReadConsistency, ServeOptions } from './options.js';
import type { Node, Served, Watch } from './node.js';
import { Watches, type Watcher } from './watch.js';
import { countRange, getKey, listRange, snapshot } from './reads.js';
import * as C from './codec.js';
import { ErrClosed, ErrCompacted, ErrFutureRev, ErrKeyExists, ErrLeaseNotFound, ErrRevisionMismatch, KvsError } from './errors.js';
import type {
  DeleteResult, GetOptions, KeyValue, Lease, LeaseStatus, ListOptions, ListResult, PutOptions, Role, Txn, TxnOp, TxnResult, WatchOptions, WriteResult,
} from './types.js';

export interface NodeParts {
  host: Host;
  spans: Spans;
  readConsistency: ReadConsistency;
  /** Stops what open() started and closes the engine. */
  close: () => Promise<void>;
  /** Opens a client port on the node (embed/serve.ts). */
  serve: (opts: ServeOptions) => Promise<Served>;
}

export class EmbeddedNode implements Node {
  readonly #host: Host;
  readonly #spans: Spans;
  readonly #watches: Watches;
  readonly #linearizable: boolean;
  readonly #closeParts: () => Promise<void>;
  readonly #serve: NodeParts['serve'];
  /** The client ports serve() opened and not yet closed: close() closes them first. */
  readonly #served = new Set<Served>();
  #closing: Promise<void> | undefined;
  #registry: Registry | undefined;
  readonly #unsubscribeGauges: () => void;

  constructor(parts: NodeParts) {
    this.#host = parts.host;
    this.#spans = parts.spans;
    this.#linearizable = parts.readConsistency === 'linearizable';
    this.#closeParts = parts.close;
    this.#serve = parts.serve;
    const engine = parts.host.engine;
    this.#watches = new Watches(engine.db, engine.feed);
    // The revision gauges follow each committed batch (`kvs run`'s storage sets them per scrape).
    const gauges = () => {
      M.currentRevision.set(engine.revision);
      M.compactRevision.set(engine.executor.compactRevision);
    };
    gauges();
    this.#unsubscribeGauges = engine.feed.subscribe(gauges);
  }

  // ---- writes -------------------------------------------------------------------------------

  async put(key: Bytes, value: Bytes, opts: PutOptions = {}): Promise<WriteResult> {
    const k = C.toBytes(key);
    const body = C.putRequest(k, C.toBytes(value, 'value'), C.leaseId(opts.lease));
    return this.#spans.write('put', k, async (tp) => ({ revision: C.revisionOf('etcdserverpb.PutResponse', await this.#write(Op.PUT, body, tp)) }));
  }

  async create(key: Bytes, value: Bytes, opts: PutOptions = {}): Promise<WriteResult> {
    const k = C.toBytes(key);
    const r = await this.#guarded('create', k, 0, [{ put: k, value, lease: opts.lease }], (r) => new ErrKeyExists(k, modRevisionIn(r)));
    return { revision: r.revision };
  }

  async update(key: Bytes, value: Bytes, expectedModRevision: number, opts: PutOptions = {}): Promise<WriteResult> {
    const k = C.toBytes(key);
    const kind = expectedModRevision === 0 ? 'create' : 'update';
    const r = await this.#guarded(kind, k, expectedModRevision, [{ put: k, value, lease: opts.lease }], (r) => new ErrRevisionMismatch(k, expectedModRevision, modRevisionIn(r)));
    return { revision: r.revision };
  }

  async delete(key: Bytes): Promise<DeleteResult> {
    const k = C.toBytes(key);
    const body = C.deleteRequest(k);
    return this.#spans.write('delete', k, async (tp) => C.deleteResult(await this.#write(Op.DELETE_RANGE, body, tp)));
  }

  async deleteIfRevision(key: Bytes, revision: number): Promise<DeleteResult> {
    const k = C.toBytes(key);
    const r = await this.#guarded('delete_if_revision', k, revision, [{ delete: k }], (r) => new ErrRevisionMismatch(k, revision, modRevisionIn(r)));
    const op = r.results[0];
    return { revision: r.revision, deleted: op?.type === 'delete' ? op.deleted : 0 };
  }

  async txn(t: Txn): Promise<TxnResult> {
    const message = C.txnMessage(t.if ?? [], t.then ?? [], t.else ?? []);
    const { kind, key } = classifyTxn(message);
    const body = C.encodeTxn(message);
    return this.#spans.write(kind, key, async (tp) => C.txnResult(await this.#write(Op.TXN, body, tp)));
  }

  async compact(revision: number, opts: { physical?: boolean } = {}): Promise<WriteResult> {
    const body = C.compactRequest(revision, opts.physical === true);
    return this.#spans.write('compact', undefined, async (tp) => {
      try {
        return { revision: C.revisionOf('etcdserverpb.CompactionResponse', await this.#write(Op.COMPACT, body, tp)) };
      } catch (err) {
        const revs = snapshot(this.#host.engine.db);
        if (err instanceof ErrCompacted) throw new ErrCompacted(revision, revs.compacted);
        if (err instanceof ErrFutureRev) throw new ErrFutureRev(revision, revs.current);
        throw err;
      }
    });
  }

  // ---- reads --------------------------------------------------------------------------------

  get(key: Bytes, opts: GetOptions = {}): Promise<KeyValue | undefined> {
    if (this.#linearizable) return this.linearizableGet(key, opts);
    this.#check();
    return settle(() => getKey(this.#host.engine.db, C.toBytes(key), opts.revision));
  }

  exists(key: Bytes): Promise<boolean> {
    if (this.#linearizable) return this.linearizableExists(key);
    this.#check();
    return settle(() => countRange(this.#host.engine.db, C.toBytes(key), Buffer.alloc(0)) > 0);
  }

  list(prefix: Bytes, opts: ListOptions = {}): Promise<ListResult> {
    if (this.#linearizable) return this.linearizableList(prefix, opts);
    this.#check();
    return settle(() => this.#list(prefix, opts));
  }

  count(prefix: Bytes): Promise<number> {
    if (this.#linearizable) return this.linearizableCount(prefix);
    this.#check();
    return settle(() => this.#count(prefix));
  }

  linearizableGet(key: Bytes, opts: GetOptions = {}): Promise<KeyValue | undefined> {
    const k = C.toBytes(key);
    return this.#linearized('get', k, () => getKey(this.#host.engine.db, k, opts.revision));
  }

  linearizableExists(key: Bytes): Promise<boolean> {
    const k = C.toBytes(key);
    return this.#linearized('exists', k, () => countRange(this.#host.engine.db, k, Buffer.alloc(0)) > 0);
  }

  linearizableList(prefix: Bytes, opts: ListOptions = {}): Promise<ListResult> {
    const p = C.toBytes(prefix);
    return this.#linearized('list', p, () => this.#list(p, opts));
  }

  linearizableCount(prefix: Bytes): Promise<number> {
    const p = C.toBytes(prefix);
    return this.#linearized('count', p, () => this.#count(p));
  }

  currentRevision(): number {
    this.#check();
    return snapshot(this.#host.engine.db).current;
  }

  compactRevision(): number {
    this.#check();
    return snapshot(this.#host.engine.db).compacted;
  }

  watch(keyOrPrefix: Bytes, opts: WatchOptions = {}): Watch {
    this.#check();
    const w: Watcher = this.#watches.open(C.toBytes(keyOrPrefix), opts.prefix === true, opts.startRevision);
    return w;
  }

  // ---- leases -------------------------------------------------------------------------------

  async grantLease(ttl: number): Promise<Lease> {
    if (!Number.isSafeInteger(ttl) || ttl < 1) throw new KvsError(`lease TTL must be a whole number of seconds, at least 1, got ${ttl}`, 3);
    return C.leaseGrantResult(await this.#write(Op.LEASE_GRANT, C.leaseGrantRequest(ttl)));
  }

  async keepAlive(lease: bigint | Lease): Promise<number> {
    this.#check();
    const id = C.leaseId(lease);
    const ttl = C.leaseKeepAliveTtl(await this.#host.routes.lease(Op.LEASE_KEEPALIVE, C.leaseIdRequest(id)));
    if (ttl <= 0) throw new ErrLeaseNotFound(id);
    return ttl;
  }

  async revokeLease(lease: bigint | Lease): Promise<WriteResult> {
    const id = C.leaseId(lease);
    try {
      return { revision: C.revisionOf('etcdserverpb.LeaseRevokeResponse', await this.#write(Op.LEASE_REVOKE, C.leaseIdRequest(id))) };
    } catch (err) {
      throw err instanceof ErrLeaseNotFound ? new ErrLeaseNotFound(id) : err;
    }
  }

  async leaseTimeToLive(lease: bigint | Lease): Promise<LeaseStatus> {
    this.#check();
    const id = C.leaseId(lease);
    const r = C.leaseTimeToLiveResult(await this.#host.routes.lease(Op.LEASE_TIME_TO_LIVE, C.leaseTimeToLiveRequest(id)));
    if (r.ttl < 0) throw new ErrLeaseNotFound(id);
    return r;
  }

  // ---- the node -----------------------------------------------------------------------------

  role(): Role {
    return this.#host.routes.role();
  }

  metrics(): Registry {
    return (this.#registry ??= M.ownedRegistry(['storage']));
  }

  async serve(opts: ServeOptions): Promise<Served> {
    this.#check();
    const port = await this.#serve(opts);
    const served: Served = {
      port: port.port,
      close: async () => {
        this.#served.delete(served);
        await port.close();
      },
    };
    this.#served.add(served);
    return served;
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      await Promise.all([...this.#served].map((s) => s.close()));
      this.#watches.endAll();
      this.#unsubscribeGauges();
      await this.#closeParts();
    })();
    return this.#closing;
  }

  get closed(): boolean {
    return this.#closing !== undefined;
  }

  // ---- internals ----------------------------------------------------------------------------

  #check(): void {
    if (this.#closing) throw new ErrClosed();
  }

  #write(op: number, body: Uint8Array, traceParent?: string): Promise<Buffer> {
    if (this.#closing) return Promise.reject(new ErrClosed());
    return this.#host.routes.write(op, body, traceParent);
  }

  /**
   * A txn `If(mod_revision(k) == rev) Then(ops) Else(Range k)`: the shapes of create, update and
   * guarded delete. When the compare fails it rejects with `refused` (inside the span, which
   * then records the error).
   */
  #guarded(kind: 'create' | 'update' | 'delete_if_revision', key: Buffer, rev: number, then: TxnOp[], refused: (r: TxnResult) => Error): Promise<TxnResult> {
    const message = C.txnMessage([{ key, target: 'modRevision', op: '==', value: rev }], then, [{ get: key }]);
    const body = C.encodeTxn(message);
    return this.#spans.write(kind, key, async (tp) => {
      const r = C.txnResult(await this.#write(Op.TXN, body, tp));
      if (!r.succeeded) throw refused(r);
      return r;
    });
  }

  #linearized<T>(kind: ReadKind, key: Buffer, read: () => T): Promise<T> {
    if (this.#closing) return Promise.reject(new ErrClosed());
    return this.#spans.read(kind, key, async () => {
      await this.#host.routes.linearize();
      return read();
    });
  }

  #list(prefix: Bytes, opts: ListOptions): ListResult {
    const [key, rangeEnd] = C.rangeOf(C.toBytes(prefix), true);
    return listRange(this.#host.engine.db, key, rangeEnd, opts);
  }

  #count(prefix: Bytes): number {
    const [key, rangeEnd] = C.rangeOf(C.toBytes(prefix), true);
    return countRange(this.#host.engine.db, key, rangeEnd);
  }
}

/** The mod revision the failed guard's Else(Range k) read (0: the key does not exist). */
function modRevisionIn(r: TxnResult): number {
  const read = r.results[0];
  return read?.type === 'get' ? (read.kvs[0]?.modRevision ?? 0) : 0;
}

/** A synchronous read as a promise: its throw becomes the rejection. */
function settle<T>(read: () => T): Promise<T> {
  try {
    return Promise.resolve(read());
  } catch (err) {
    return Promise.reject(err);
  }
}
