// The object store on S3 or an S3-compatible service (@aws-sdk/client-s3).
//
// Compatibility choices (measured on Ceph RGW 16, see docs/architecture.md#object-store-sharedobjectstore):
// - path-style addressing for every endpoint but AWS's own (`localhost` would otherwise
//   resolve as `bucket.localhost`);
// - checksums only WHEN_REQUIRED: the SDK's default turns stream bodies into aws-chunked
//   uploads that Ceph rejects;
// - `If-Match` is sent without the quotes (Ceph answers 412 to the quoted form even when it
//   matches), falling back to the quoted form if a server refuses the bare one;
// - a conditional PUT that fails with anything but 412 (5xx, 409, a lost connection) may or
//   may not have been applied, so the object is re-read to decide; the SDK's own retries are
//   off for conditional PUTs for the same reason;
// - `If-Match` on a missing key is 412 on Ceph and 404 on AWS: both are a failed precondition.

import { createHash } from 'node:crypto';
import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectVersionsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { PreconditionFailedError, type GetResult, type ListOptions, type ObjectInfo, type ObjectStore, type ObjectVersion, type PutOptions, type PutResult } from './store.js';

export interface S3StoreOptions {
  /** http(s) URL of the service; undefined means AWS S3 in the configured region. */
  endpoint?: string;
  bucket: string;
  prefix: string;
  credentials?: { accessKeyId: string; secretAccessKey: string };
  /** The SDK's region; default AWS_REGION, AWS_DEFAULT_REGION, else us-east-1. */
  region?: string;
  env?: NodeJS.ProcessEnv;
}

// The SDK warns on every process start that its 2027 releases will need Node 22; that line
// would land in every kvs command's stderr. The SDK's own switch silences it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const DELETE_BATCH = 1000; // DeleteObjects' limit
const CONDITIONAL_ATTEMPTS = 5;

/** S3 etags are quoted; kvs passes them around bare (the form Ceph accepts in If-Match). */
function bareEtag(etag: string | undefined): string {
  return (etag ?? '').replace(/^"(.*)"$/, '$1');
}

function status(err: unknown): number | undefined {
  return err instanceof S3ServiceException ? err.$metadata?.httpStatusCode : (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}

function errName(err: unknown): string {
  return (err as Error)?.name ?? '';
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class S3ObjectStore implements ObjectStore {
  readonly location: string;
  private readonly client: S3Client;
  /** For conditional PUTs: no automatic retries (see above). */
  private readonly onceClient: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;

  constructor(opts: S3StoreOptions) {
    const env = opts.env ?? process.env;
    this.bucket = opts.bucket;
    this.prefix = opts.prefix;
    this.location = `s3://${opts.bucket}/${opts.prefix}${opts.endpoint ? ` at ${opts.endpoint}` : ''}`;
    const isAws = !opts.endpoint || /(^|\.)amazonaws\.com$/.test(new URL(opts.endpoint).hostname);
    const config: S3ClientConfig = {
      endpoint: opts.endpoint,
      region: opts.region || env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1',
      forcePathStyle: !isAws,
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    };
    // KVS_S3_* take precedence; otherwise the SDK's standard chain (environment, shared
    // files, instance profile, web identity).
    if (opts.credentials) {
      config.credentials = opts.credentials;
    } else if (env.KVS_S3_ACCESS_KEY_ID && env.KVS_S3_SECRET_ACCESS_KEY) {
      config.credentials = { accessKeyId: env.KVS_S3_ACCESS_KEY_ID, secretAccessKey: env.KVS_S3_SECRET_ACCESS_KEY };
    } else if (env.KVS_S3_ACCESS_KEY_ID || env.KVS_S3_SECRET_ACCESS_KEY) {
      throw new Error('set both KVS_S3_ACCESS_KEY_ID and KVS_S3_SECRET_ACCESS_KEY, or neither');
    }
    this.client = new S3Client(config);
    this.onceClient = new S3Client({ ...config, maxAttempts: 1 });
  }

  private fail(op: string, key: string, err: unknown): Error {
    const e = new Error(`object store ${this.location}: ${op} ${key} failed: ${errName(err)} ${(err as Error)?.message ?? err}`);
    (e as Error & { cause?: unknown }).cause = err;
    return e;
  }

  async get(key: string, opts: { versionId?: string } = {}): Promise<GetResult | undefined> {
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, VersionId: opts.versionId }));
      const body = Buffer.from(await res.Body!.transformToByteArray());
      return { body, etag: bareEtag(res.ETag), versionId: res.VersionId };
    } catch (err) {
      // A missing bucket is a wrong flag or a lost bucket, not an empty prefix (a node would boot EMPTY).
      if (errName(err) === 'NoSuchBucket') throw this.fail('get', key, err);
      // 404: no such key or version; 405: that version is a delete marker.
      if (status(err) === 404 || status(err) === 405) return undefined;
      throw this.fail('get', key, err);
    }
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const res = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
      return {
        key,
        size: res.ContentLength ?? 0,
        etag: bareEtag(res.ETag),
        lastModified: res.LastModified ?? new Date(0),
        versionId: res.VersionId,
      };
    } catch (err) {
      if (status(err) === 404) return undefined;
      throw this.fail('head', key, err);
    }
  }

  async put(key: string, body: Buffer, opts: PutOptions = {}): Promise<PutResult> {
    const conditional = opts.ifNoneMatch === '*' || opts.ifMatch !== undefined;
    if (!conditional) {
      try {
        const res = await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, Body: body }));
        return { etag: bareEtag(res.ETag), versionId: res.VersionId };
      } catch (err) {
        throw this.fail('put', key, err);
      }
    }
    return this.conditionalPut(key, body, opts);
  }

  private async conditionalPut(key: string, body: Buffer, opts: PutOptions): Promise<PutResult> {
    const md5 = createHash('md5').update(body).digest('hex');
    let ifMatch = opts.ifMatch === undefined ? undefined : bareEtag(opts.ifMatch);
    let triedQuoted = false;
    let lastErr: unknown;
    for (let attempt = 1; attempt <= CONDITIONAL_ATTEMPTS; attempt++) {
      try {
        const res = await this.onceClient.send(
          new PutObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, Body: body, IfNoneMatch: opts.ifNoneMatch, IfMatch: ifMatch }),
        );
        return { etag: bareEtag(res.ETag), versionId: res.VersionId };
      } catch (err) {
        lastErr = err;
        const code = status(err);
        if (code === 412 || (code === 404 && opts.ifMatch !== undefined)) {
          // A server that wants the quoted form (RFC 7232) refuses the bare one even when it matches.
          if (ifMatch !== undefined && !triedQuoted) {
            const current = await this.head(key);
            if (current?.etag === ifMatch) {
              triedQuoted = true;
              ifMatch = `"${ifMatch}"`;
              continue;
            }
          }
          throw new PreconditionFailedError(key);
        }
        if (code !== undefined && code < 500 && code !== 409) throw this.fail('conditional put', key, err);
      }
      // Unknown outcome (5xx, 409 conflict, no answer): the current object decides.
      const current = await this.head(key);
      if (current && current.etag === md5) return { etag: current.etag, versionId: current.versionId };
      const stillHolds = opts.ifNoneMatch === '*' ? current === undefined : current?.etag === bareEtag(opts.ifMatch);
      if (!stillHolds) throw new PreconditionFailedError(key);
      await sleep(20 * attempt);
    }
    throw this.fail('conditional put', key, lastErr);
  }

  async delete(key: string): Promise<void> {
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
    } catch (err) {
      if (status(err) === 404) return;
      throw this.fail('delete', key, err);
    }
  }

  async deleteMany(keys: string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += DELETE_BATCH) {
      const batch = keys.slice(i, i + DELETE_BATCH);
      let res;
      try {
        res = await this.client.send(
          new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Quiet: true, Objects: batch.map((k) => ({ Key: this.prefix + k })) } }),
        );
      } catch (err) {
        throw this.fail('delete', `${batch.length} objects from ${batch[0]}`, err);
      }
      const errors = (res.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey');
      if (errors.length > 0) {
        const first = errors[0]!;
        throw new Error(`object store ${this.location}: deleting ${errors.length} objects failed, first ${first.Key}: ${first.Code} ${first.Message ?? ''}`);
      }
    }
  }

  async *list(prefix: string, opts: ListOptions = {}): AsyncIterable<ObjectInfo> {
    const startAfter = opts.startAfter === undefined ? undefined : this.prefix + opts.startAfter;
    let token: string | undefined;
    do {
      let res;
      try {
        res = await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix + prefix, ContinuationToken: token, StartAfter: token ? undefined : startAfter }));
      } catch (err) {
        throw this.fail('list', prefix, err);
      }
      for (const o of res.Contents ?? []) {
        yield { key: o.Key!.slice(this.prefix.length), size: o.Size ?? 0, etag: bareEtag(o.ETag), lastModified: o.LastModified ?? new Date(0) };
      }
      token = res.IsTruncated ? res.NextContinuationToken : undefined;
    } while (token);
  }

  async *listVersions(prefix: string): AsyncIterable<ObjectVersion> {
    let keyMarker: string | undefined;
    let versionMarker: string | undefined;
    for (;;) {
      let res;
      try {
        res = await this.client.send(
          new ListObjectVersionsCommand({ Bucket: this.bucket, Prefix: this.prefix + prefix, KeyMarker: keyMarker, VersionIdMarker: versionMarker }),
        );
      } catch (err) {
        throw this.fail('list versions', prefix, err);
      }
      const page: ObjectVersion[] = [];
      for (const v of res.Versions ?? []) {
        page.push({
          key: v.Key!.slice(this.prefix.length),
          size: v.Size ?? 0,
          etag: bareEtag(v.ETag),
          lastModified: v.LastModified ?? new Date(0),
          versionId: v.VersionId ?? 'null',
          isLatest: v.IsLatest ?? false,
          deleteMarker: false,
        });
      }
      for (const m of res.DeleteMarkers ?? []) {
        page.push({
          key: m.Key!.slice(this.prefix.length),
          size: 0,
          etag: '',
          lastModified: m.LastModified ?? new Date(0),
          versionId: m.VersionId ?? 'null',
          isLatest: m.IsLatest ?? false,
          deleteMarker: true,
        });
      }
      // Key order, newest first within a key (S3 returns versions and markers in two lists).
      page.sort((a, b) => Buffer.compare(Buffer.from(a.key), Buffer.from(b.key)) || b.lastModified.getTime() - a.lastModified.getTime());
      yield* page;
      if (!res.IsTruncated) return;
      keyMarker = res.NextKeyMarker;
      versionMarker = res.NextVersionIdMarker;
    }
  }

  close(): void {
    this.client.destroy();
    this.onceClient.destroy();
  }
}
