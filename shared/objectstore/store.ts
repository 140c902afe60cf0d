// The object store as kvs sees it: a flat namespace of immutable-ish objects under one
// bucket and prefix, with atomic conditional writes. Two implementations behave identically
// (S3 through @aws-sdk/client-s3, and a local directory for the embedded default); the
// encryption layer wraps either. Keys passed here are relative to the prefix
// (`manifest/latest`, `wal/...`, `sst/...`, `checkpoint/...`).

export interface ObjectInfo {
  key: string;
  size: number;
  /** Opaque; pass back unchanged as `ifMatch`. */
  etag: string;
  lastModified: Date;
  /** Set on versioned stores. */
  versionId?: string;
}

export interface GetResult {
  body: Buffer;
  etag: string;
  versionId?: string;
}

export interface PutOptions {
  /** Create only if absent (`If-None-Match: *`). */
  ifNoneMatch?: '*';
  /** Replace only if the current object's etag is this one (`If-Match`). */
  ifMatch?: string;
}

export interface PutResult {
  etag: string;
  versionId?: string;
}

/** A conditional write lost: the object exists (ifNoneMatch) or changed (ifMatch). */
export class PreconditionFailedError extends Error {
  constructor(readonly key: string) {
    super(`object store: precondition failed for ${key}`);
    this.name = 'PreconditionFailedError';
  }
}

export interface ListOptions {
  /** A key (relative to the store's prefix): list only keys after it in byte order. */
  startAfter?: string;
}

export interface ObjectVersion extends ObjectInfo {
  versionId: string;
  isLatest: boolean;
  deleteMarker: boolean;
}

export interface ObjectStore {
  /** For logs and messages: `s3://bucket/prefix` or `file:///dir/bucket/prefix`. */
  readonly location: string;
  /** undefined when the object (or that version) does not exist. */
  get(key: string, opts?: { versionId?: string }): Promise<GetResult | undefined>;
  head(key: string): Promise<ObjectInfo | undefined>;
  /** Throws PreconditionFailedError when a condition does not hold. */
  put(key: string, body: Buffer, opts?: PutOptions): Promise<PutResult>;
  /** Deleting a missing object is not an error. */
  delete(key: string): Promise<void>;
  deleteMany(keys: string[]): Promise<void>;
  /**
   * Every object whose key starts with `prefix`, in key order; with `startAfter`, only those
   * whose key sorts after it (S3's StartAfter), so a long listing can be read from a point.
   */
  list(prefix: string, opts?: ListOptions): AsyncIterable<ObjectInfo>;
  /** Every version of every object under `prefix` (versioned stores; others yield none). */
  listVersions(prefix: string): AsyncIterable<ObjectVersion>;
  close(): void;
}
