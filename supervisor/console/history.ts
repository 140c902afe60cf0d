// A key's history through the etcd API alone: the live version, then a Range at the revision
// before each version's mod_revision, back to the version that created it (version 1) or to
// the compact revision, below which etcd keeps nothing. Each read after the first is at a fixed
// past revision, which never changes: serializable (no leader round trip on a follower).
import * as grpc from '@grpc/grpc-js';
import { EtcdError, type EtcdApi, type KeyValue } from './etcd.js';

export interface KeyHistory {
  /** The revision of the first read. */
  revision: number;
  compactRevision: number;
  /** Newest first. */
  revisions: KeyValue[];
  /** Why the walk stopped: created (version 1 reached), compacted, limit, or absent (no live key). */
  end: 'created' | 'compacted' | 'limit' | 'absent';
}

export async function keyHistory(etcd: EtcdApi, token: string | undefined, key: Buffer, limit: number, compactRevision: number): Promise<KeyHistory> {
  if (key.length === 0) throw new EtcdError(grpc.status.INVALID_ARGUMENT, 'etcdserver: key is not provided');
  const first = await etcd.range(token, { key });
  const revisions: KeyValue[] = [];
  let kv = first.kvs[0];
  if (!kv) return { revision: first.revision, compactRevision, revisions, end: 'absent' };
  for (;;) {
    revisions.push(kv);
    if (kv.version <= 1) return { revision: first.revision, compactRevision, revisions, end: 'created' };
    if (revisions.length >= limit) return { revision: first.revision, compactRevision, revisions, end: 'limit' };
    const at = kv.modRevision - 1;
    if (at < compactRevision) return { revision: first.revision, compactRevision, revisions, end: 'compacted' };
    let r;
    try {
      r = await etcd.range(token, { key, revision: at, serializable: true });
    } catch (err) {
      // Compacted meanwhile (the watermark the caller gave was older).
      if (err instanceof EtcdError && err.code === grpc.status.OUT_OF_RANGE) return { revision: first.revision, compactRevision: Math.max(compactRevision, at + 1), revisions, end: 'compacted' };
      throw err;
    }
    const prev = r.kvs[0];
    if (!prev) return { revision: first.revision, compactRevision, revisions, end: 'created' };
    kv = prev;
  }
}
