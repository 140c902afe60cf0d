// The errors an embedded node rejects with: one class per condition a caller acts on, so that
// `err instanceof ErrKeyExists` works, each with a message that says what to do. Errors from
// the engine arrive as etcd's gRPC status and message (the same code path as `kvs run`);
// fromEtcd() maps them, keeping both on the error (`code`, `etcdMessage`).
import { status } from '@grpc/grpc-js';
import { Errors } from '../shared/errors.js';

/** Every error of the embedding API. */
export class KvsError extends Error {
  constructor(
    message: string,
    /** etcd's gRPC status code of the condition (what a `kvs run` client would see). */
    readonly code: number = status.UNKNOWN,
    /** etcd's message text for it, when there is one. */
    readonly etcdMessage?: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** create() of a key that exists. Use put() to write it anyway, or update() to compare-and-swap. */
export class ErrKeyExists extends KvsError {
  constructor(readonly key: Uint8Array, readonly modRevision: number) {
    super(`key ${show(key)} already exists (mod revision ${modRevision}): use put() to overwrite it or update() to compare-and-swap`, status.FAILED_PRECONDITION);
  }
}

/** update() or deleteIfRevision() whose expected mod revision is not the key's (0: the key does not exist). */
export class ErrRevisionMismatch extends KvsError {
  constructor(readonly key: Uint8Array, readonly expected: number, readonly actual: number) {
    super(
      `key ${show(key)} is at mod revision ${actual === 0 ? '0 (it does not exist)' : actual}, not the expected ${expected}: read it again and retry with its current mod revision`,
      status.FAILED_PRECONDITION,
    );
  }
}

/** A read at a revision below the compact revision, or a watch from one. */
export class ErrCompacted extends KvsError {
  constructor(readonly revision?: number, readonly compactRevision?: number) {
    super(
      `${revision !== undefined ? `revision ${revision}` : 'the required revision'} has been compacted${compactRevision !== undefined ? ` (the compact revision is ${compactRevision})` : ''}: ` +
        'read the current state again (list) and watch from its revision',
      status.OUT_OF_RANGE,
      Errors.compacted.message,
    );
  }
}

/** A read at a revision after the current one. */
export class ErrFutureRev extends KvsError {
  constructor(readonly revision?: number, readonly currentRevision?: number) {
    super(
      `${revision !== undefined ? `revision ${revision}` : 'the required revision'} is in the future${currentRevision !== undefined ? ` (the current revision is ${currentRevision})` : ''}: read at or below currentRevision()`,
      status.OUT_OF_RANGE,
      Errors.futureRev.message,
    );
  }
}

/** A lease id that was never granted, was revoked or has expired. */
export class ErrLeaseNotFound extends KvsError {
  constructor(readonly lease?: bigint) {
    super(`lease ${lease !== undefined ? `${lease} ` : ''}not found: it expired or was revoked; grant a new one with grantLease()`, status.NOT_FOUND, Errors.leaseNotFound.message);
  }
}

/**
 * A write that this node could not get to a leader: it is a follower and the leader is
 * unreachable (election in progress, partition). Retry; the outcome of a write that failed
 * this way is known: it was not applied.
 */
export class ErrNotLeader extends KvsError {
  constructor(etcdMessage: string = Errors.noLeader.message) {
    super(`no leader to take the write (${etcdMessage}): the cluster is electing one or this node is cut off from it; retry`, status.UNAVAILABLE, etcdMessage);
  }
}

/** A request etcd refuses as such: an empty key, a key or request too large, too many txn operations, a duplicate key in a txn. */
export class ErrInvalidArgument extends KvsError {
  constructor(etcdMessage: string) {
    super(etcdMessage, status.INVALID_ARGUMENT, etcdMessage);
  }
}

/** The node cannot take the write now (writes refused below the free-space floor, the WAL failed): the message says why. */
export class ErrUnavailable extends KvsError {
  constructor(etcdMessage: string) {
    super(etcdMessage, status.UNAVAILABLE, etcdMessage);
  }
}

/** The node was closed (close()): open the data directory again to use it. */
export class ErrClosed extends KvsError {
  constructor() {
    super('the node is closed: open() the data directory again to use it', status.UNAVAILABLE);
  }
}

/** An engine answer that failed: etcd's status and message, as the class a caller can match. */
export function fromEtcd(code: number, message: string): KvsError {
  switch (message) {
    case Errors.compacted.message:
      return new ErrCompacted();
    case Errors.futureRev.message:
      return new ErrFutureRev();
    case Errors.leaseNotFound.message:
      return new ErrLeaseNotFound();
    case Errors.noLeader.message:
    case Errors.leaderChanged.message:
      return new ErrNotLeader(message);
  }
  if (code === status.INVALID_ARGUMENT) return new ErrInvalidArgument(message);
  if (code === status.UNAVAILABLE || code === status.RESOURCE_EXHAUSTED) return new ErrUnavailable(message);
  return new KvsError(message, code, message);
}

/** A key in a message: its text when it is printable UTF-8, else hex. Kept short. */
function show(key: Uint8Array): string {
  const b = Buffer.from(key.buffer, key.byteOffset, key.byteLength);
  const text = b.toString('utf8');
  const printable = !text.includes('\uFFFD') && !/[\x00-\x1f\x7f]/.test(text);
  const s = printable ? JSON.stringify(text) : `0x${b.toString('hex')}`;
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}
