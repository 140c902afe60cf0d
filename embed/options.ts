// The options of open(), in TypeScript's naming of the specification's embedding options
// (DataDir, ObjectStore, AncestorStore, BranchPoint, PeerServerTLS, PeerClientTLS,
// ReadConsistency, PeerBufferSize, WALSyncUpload, CheckpointInterval, TracerProvider) and of
// `kvs run`'s flags where the spec names none (encryption key, node id, peer addresses,
// automatic compaction). docs/embedding.md has the table against the spec's and the flags' names.
import type { TracerProvider } from '@opentelemetry/api';
import type { ObjectStore } from '../shared/objectstore/store.js';
import type { AutoCompact } from '../shared/config.js';

/** Keys and values: text (stored as its UTF-8 bytes) or bytes. */
export type Bytes = string | Uint8Array;

export type ReadConsistency = 'linearizable' | 'serializable';

/** An object store as `kvs run`'s --s3-bucket, --s3-prefix and --s3-endpoint describe one. */
export interface ObjectStoreLocation {
  bucket: string;
  /** Key prefix inside the bucket ('' or ending with `/`). Default ''. */
  prefix?: string;
  /** `file:///dir` (a local directory) or an http(s) URL of an S3-compatible service; default `file:///var/lib/kvs-objects`. */
  endpoint?: string;
  /** S3 only: explicit credentials instead of KVS_S3_* and the AWS SDK's chain. */
  credentials?: { accessKeyId: string; secretAccessKey: string };
  /** S3 only: the region; default AWS_REGION, AWS_DEFAULT_REGION, else us-east-1. */
  region?: string;
}

/** Where a node's object store is: a location, or an object implementing kvs's ObjectStore interface. */
export type ObjectStoreOption = ObjectStoreLocation | ObjectStore;

/** Where a branch starts (spec: BranchPoint): a checkpoint of its source prefix, used on the first open only. */
export interface BranchPoint {
  /** The source (the prefix the branch was forked from), in the same bucket. */
  sourceStore: ObjectStoreOption;
  /** The source's checkpoint key, as `kvs branch fork` prints it (`checkpoint/<term>/<revision>/manifest.json`). */
  checkpointKey: string;
}

/** PEM material of peer mutual TLS (TLS 1.3), as --peer-tls-ca/-cert/-key: file paths, or the PEM itself. */
export interface PeerTlsOptions {
  ca: string | Buffer;
  cert: string | Buffer;
  key: string | Buffer;
}

export interface OpenOptions {
  /** The node's data directory (LMDB, wal/, run/); created if absent. Required. Spec: DataDir. */
  dataDir: string;
  /** Archive the node to an object store (WAL segments, checkpoints, restore at open). Spec: ObjectStore. */
  objectStore?: ObjectStoreOption;
  /** The store a branch's shared SST files are read from when not in its own prefix. Spec: AncestorStore. */
  ancestorStore?: ObjectStoreOption;
  /** Start a branch from a source checkpoint (first open only). Spec: BranchPoint. */
  branchPoint?: BranchPoint;
  /** The 32-byte AES-256 key of the object-store prefix (--object-store-encryption-key-file). */
  encryptionKey?: Uint8Array;
  /**
   * With an object store: every write batch is in the object store before it is acknowledged
   * (true, the default, as --wal-sync-upload), or segments are uploaded as they are sealed.
   * Spec: WALSyncUpload.
   */
  walSyncUpload?: boolean;
  /** Time between checkpoints uploaded to the object store: ms, or a duration such as '15m'. Spec: CheckpointInterval. */
  checkpointInterval?: number | string;

  /** This node's name in a cluster (--node-id); default 'default'. */
  nodeId?: string;
  /** The peer port's listen address, host:port (--peer-listen); turns on cluster mode (needs objectStore). */
  peerListen?: string;
  /** The peer address the other nodes dial (--advertise-peer); default peerListen. */
  advertisePeer?: string;
  /** Server side of peer TLS (this node's peer port). Spec: PeerServerTLS. */
  peerServerTLS?: PeerTlsOptions;
  /** Client side of peer TLS (dialing the leader). Spec: PeerClientTLS. */
  peerClientTLS?: PeerTlsOptions;
  /** Recent WAL entries a leader keeps for followers catching up; default 10,000. Spec: PeerBufferSize. */
  peerBufferSize?: number;
  /**
   * What the plain reads (get, exists, list, count) are: 'linearizable' (the default, as
   * --read-consistency) or 'serializable' (a follower answers from what it holds). The
   * linearizable* reads always are. On a single node both are current. Spec: ReadConsistency.
   */
  readConsistency?: ReadConsistency;

  /** Spans (kvs.put, kvs.get, ...) go to this provider's tracer; default the global provider. Spec: TracerProvider. */
  tracerProvider?: TracerProvider;
  /** Automatic compaction of history (--auto-compact-*); default off. Durations in ms. */
  autoCompact?: AutoCompact;
  /** As --auth-enabled for the clients of node.serve(): auth enabled on the data stays enabled only with it. Default false. */
  authEnabled?: boolean;
  /** Log lines (pino): 'silent' (the default), 'fatal' ... 'trace'. */
  logLevel?: 'silent' | 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
}

/** Options of node.serve(): expose the embedded node on an etcd v3 client port. */
export interface ServeOptions {
  /** host:port, as --listen. */
  listen: string;
  /** PEM certificate and key (and a CA to require client certificates), as --client-tls-*. */
  tls?: { cert: string | Buffer; key: string | Buffer; ca?: string | Buffer };
}
