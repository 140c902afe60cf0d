// Storage's side of cluster mode, whoever hosts it: storage's process (main.ts, the peer agent
// and archiver on their Unix sockets) and an embedded node (embed/cluster.ts, both in its own
// process). The engine's options of a cluster member, and its attachment to the peer agent
// with the leader-only work it starts and stops (lease expiry, uploads, --auth-enabled).
import { clusterIdOf, memberIdOf } from '../../shared/membership.js';
import type { Logger } from '../../shared/log.js';
import type { StreamChannel } from '../../shared/grpc/stream-channel.js';
import type { Engine, EngineOptions } from './engine.js';
import { openWal } from './engine/open.js';
import { PeerAttach } from './peer-attach.js';
import type { Archive } from '../../shared/objectstore/archive.js';
import { uploadWalTail } from './wal-upload.js';
import { applyAuthFlag } from './auth/startup.js';

/** What of the node's settings cluster storage reads (Config has them under these names). */
export interface ClusterMemberSettings {
  dataDir: string;
  nodeId: string;
  /** The object store's bucket and prefix: the cluster's id is made of them, the same on every node. */
  s3Bucket?: string;
  s3Prefix: string;
  /** --peer-buffer-size: how many recent entries a leader keeps for followers catching up. */
  peerBufferSize: number;
  /** --auth-enabled: applied when this node leads. */
  authEnabled: boolean;
}

/**
 * Cluster mode: uploads are asynchronous and made only while this node leads (at each seal,
 * the WAL through what is committed, and at election what the object store lacks); a
 * follower's WAL is trimmed once LMDB holds it and it is older than the last
 * --peer-buffer-size entries. A sealed segment may end in records not yet committed (appended
 * before the followers' ACKs): those wait for a later upload. Uploaded, they would be history
 * to a node that catches up from the store, though this leader may never acknowledge them.
 */
export async function clusterEngineOptions(
  cfg: ClusterMemberSettings,
  link: Archive,
  log: Logger,
  engine: () => Engine | undefined,
  reportState: (detail: string) => void = () => {},
): Promise<EngineOptions> {
  reportState('waiting for the archiver');
  await link.ready();
  const leading = () => engine()?.role === 'leader';
  let uploading = Promise.resolve();
  const uploadCommitted = () => {
    uploading = uploading
      .then(() => {
        const e = engine();
        if (e?.role === 'leader') return uploadWalTail(wal, link, log, BigInt(e.appliedIndex));
      })
      .catch((err: Error) => log.warn({ err: err.message }, 'WAL not uploaded; the next seal or election uploads it'));
  };
  const wal = openWal(cfg.dataDir, log, { onSeal: () => leading() && uploadCommitted() });
  return {
    wal,
    // A follower keeps the last --peer-buffer-size entries past what LMDB holds: should it lead,
    // it serves followers catching up from them (its buffer is seeded from its WAL).
    archivedThrough: () => (leading() ? link.archivedThrough : Math.max(0, (engine()?.appliedIndex ?? 0) - cfg.peerBufferSize)),
    cluster: { memberId: memberIdOf(cfg.nodeId), clusterId: clusterIdOf(cfg.s3Bucket!, cfg.s3Prefix) },
  };
}

/**
 * Attaches the engine to its peer agent on `channel`. The role comes from the agent; leader-only
 * work (lease expiry, uploads, the --auth-enabled flag) starts when this node leads, and stops
 * when it no longer does. `onRole` hears every change (the embedded archiver follows it).
 */
export function attachToPeer(
  channel: StreamChannel,
  engine: Engine,
  link: Archive,
  cfg: ClusterMemberSettings,
  log: Logger,
  onRole: (leading: boolean, term: number) => void = () => {},
): PeerAttach {
  return new PeerAttach(channel, engine, {
    uploadThrough: (through) => uploadWalTail(engine.wal, link, log, BigInt(through)),
    onLeader: (term, termStart) => {
      link.leadFrom(term, termStart);
      onRole(true, term);
      engine.lessor.startExpiry();
      void uploadAsNewLeader(engine, link, log).catch((err: Error) => log.warn({ err: err.message }, 'WAL not uploaded; the next segment upload retries'));
      void applyAuthFlag(engine, cfg.authEnabled, log).catch((err: Error) => log.warn({ err: err.message }, 'could not apply --auth-enabled'));
    },
    onNotLeader: () => {
      engine.lessor.stop();
      onRole(false, 0);
    },
  }, log, cfg.peerBufferSize);
}

/**
 * A new leader uploads what the object store lacks of its WAL. As a follower it trimmed its WAL
 * once LMDB held it, while the previous leader may not have uploaded that part yet: if the WAL
 * no longer reaches back to the store's position, a checkpoint covers the gap first (an
 * uploaded WAL with a hole would be refused, and a restore could not cross it).
 */
async function uploadAsNewLeader(engine: Engine, link: Archive, log: Logger): Promise<void> {
  const wal = engine.wal;
  // What the WAL holds now is committed (a new leader applied its staged entries first). Not
  // what it holds after the checkpoint below: this term's batches then in flight may still be
  // refused, and their indices reused.
  const committed = wal.lastIndex;
  const reaches = wal.isEmpty ? BigInt(engine.appliedIndex) <= BigInt(link.uploadedThrough) : wal.firstIndex <= BigInt(link.uploadedThrough) + 1n;
  if (!reaches) {
    log.info({ walFirst: Number(wal.firstIndex), uploadedThrough: link.uploadedThrough }, 'the WAL no longer reaches the object store\'s: checkpointing first');
    const c = await link.checkpoint();
    log.info({ checkpoint: c.key, appliedIndex: c.appliedIndex }, 'checkpoint written');
  }
  await uploadWalTail(wal, link, log, committed);
}
