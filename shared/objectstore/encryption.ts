// Client-side encryption of object bodies (spec: "Object-store encryption"): AES-256-GCM with
// one 32-byte key per prefix. Keys stay visible; only bodies are protected.
//
// Body format, self-describing so that a reader can tell an encrypted object from a plain one:
//   magic (8 bytes, "\x89KVS-ENC") | version (1 byte, 1) | nonce (12 bytes) | ciphertext | tag (16 bytes)
// The object key (relative to the prefix) is the additional authenticated data, so an
// encrypted body moved to another key fails to decrypt instead of being served there.
//
// Both directions of mixing are refused: the encrypted store refuses a body without the
// header, and the plain store (`PlainGuardStore`) refuses a body with it.

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { GetResult, ListOptions, ObjectInfo, ObjectStore, ObjectVersion, PutOptions, PutResult } from './store.js';

export const ENCRYPTED_MAGIC = Buffer.from([0x89, 0x4b, 0x56, 0x53, 0x2d, 0x45, 0x4e, 0x43]); // \x89KVS-ENC
const VERSION = 1;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = ENCRYPTED_MAGIC.length + 1 + NONCE_BYTES;
/** What encryption adds to a body. */
export const ENCRYPTION_OVERHEAD = HEADER_BYTES + TAG_BYTES;

const KEY_FLAGS = '--object-store-encryption-key-file or --object-store-encryption-key-env';

export function isEncryptedBody(body: Buffer): boolean {
  return body.length >= ENCRYPTED_MAGIC.length && body.subarray(0, ENCRYPTED_MAGIC.length).equals(ENCRYPTED_MAGIC);
}

/** Key material in one of the spec's three encodings: raw 32 bytes, 64 hex characters, base64. */
export function parseEncryptionKey(material: Buffer, source: string): Buffer {
  if (material.length === 32) return Buffer.from(material);
  const text = material.toString('utf8').trim();
  if (/^[0-9a-fA-F]{64}$/.test(text)) return Buffer.from(text, 'hex');
  if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) {
    const key = Buffer.from(text, 'base64');
    if (key.length === 32) return key;
  }
  throw new Error(
    `object-store encryption key from ${source} is not a 32-byte AES-256 key: expected raw 32 bytes, ` +
      `64 hex characters or base64 of 32 bytes, got ${material.length} bytes`,
  );
}

/** The key named by the flags, or undefined when neither is given. */
export function loadEncryptionKey(opts: { keyFile?: string; keyEnv?: string }, env: NodeJS.ProcessEnv = process.env): Buffer | undefined {
  if (opts.keyFile && opts.keyEnv) {
    throw new Error('give only one of --object-store-encryption-key-file and --object-store-encryption-key-env');
  }
  if (opts.keyFile) {
    let material: Buffer;
    try {
      material = readFileSync(opts.keyFile);
    } catch (err) {
      throw new Error(`cannot read --object-store-encryption-key-file ${opts.keyFile}: ${(err as Error).message}`);
    }
    return parseEncryptionKey(material, `file ${opts.keyFile}`);
  }
  if (opts.keyEnv) {
    const value = env[opts.keyEnv];
    if (value === undefined || value === '') {
      throw new Error(`--object-store-encryption-key-env names ${opts.keyEnv}, but that environment variable is not set`);
    }
    return parseEncryptionKey(Buffer.from(value, 'latin1'), `environment variable ${opts.keyEnv}`);
  }
  return undefined;
}

export function encryptBody(key: Buffer, objectKey: string, plain: Buffer): Buffer {
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(Buffer.from(objectKey, 'utf8'));
  const ct = Buffer.concat([cipher.update(plain), cipher.final()]);
  return Buffer.concat([ENCRYPTED_MAGIC, Buffer.from([VERSION]), nonce, ct, cipher.getAuthTag()]);
}

export function decryptBody(key: Buffer, objectKey: string, body: Buffer, location: string, keyOption = KEY_FLAGS): Buffer {
  if (!isEncryptedBody(body)) {
    throw new Error(
      `object ${objectKey} in ${location} is not encrypted, but an encryption key was given: this prefix holds ` +
        `plaintext objects, and encrypted and plaintext objects must not be mixed. Run without ${keyOption} for this prefix, ` +
        `or use a fresh prefix for encrypted data`,
    );
  }
  const version = body[ENCRYPTED_MAGIC.length];
  if (version !== VERSION) {
    throw new Error(`object ${objectKey} in ${location} has encryption format version ${version}; this kvs reads version ${VERSION}`);
  }
  if (body.length < HEADER_BYTES + TAG_BYTES) throw new Error(`object ${objectKey} in ${location} is truncated (encrypted body of ${body.length} bytes)`);
  const nonce = body.subarray(ENCRYPTED_MAGIC.length + 1, HEADER_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', key, nonce);
  decipher.setAAD(Buffer.from(objectKey, 'utf8'));
  decipher.setAuthTag(body.subarray(body.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(body.subarray(HEADER_BYTES, body.length - TAG_BYTES)), decipher.final()]);
  } catch {
    throw new Error(
      `cannot decrypt object ${objectKey} in ${location}: wrong encryption key (every node and command on a prefix ` +
        `must use the same key), or the object is corrupt`,
    );
  }
}

/** Passes everything through to `inner`, transforming bodies on get and put. */
abstract class BodyTransformStore implements ObjectStore {
  /** The inner store belongs to someone else (an embedding program's own): close() leaves it open. */
  borrowed = false;
  /** How the user gives the key, for messages: the flags, or an embedding program's option. */
  keyOption = KEY_FLAGS;
  constructor(protected readonly inner: ObjectStore) {}
  get location(): string {
    return this.inner.location;
  }
  protected abstract encode(key: string, body: Buffer): Buffer;
  protected abstract decode(key: string, body: Buffer): Buffer;

  async get(key: string, opts?: { versionId?: string }): Promise<GetResult | undefined> {
    const res = await this.inner.get(key, opts);
    return res && { ...res, body: this.decode(key, res.body) };
  }
  /** The size of the body as `get` returns it, from the stored size. */
  protected abstract size(stored: number): number;

  async head(key: string): Promise<ObjectInfo | undefined> {
    const info = await this.inner.head(key);
    return info && { ...info, size: this.size(info.size) };
  }
  put(key: string, body: Buffer, opts?: PutOptions): Promise<PutResult> {
    return this.inner.put(key, this.encode(key, body), opts);
  }
  delete(key: string): Promise<void> {
    return this.inner.delete(key);
  }
  deleteMany(keys: string[]): Promise<void> {
    return this.inner.deleteMany(keys);
  }
  async *list(prefix: string, opts?: ListOptions): AsyncIterable<ObjectInfo> {
    for await (const info of this.inner.list(prefix, opts)) yield { ...info, size: this.size(info.size) };
  }
  async *listVersions(prefix: string): AsyncIterable<ObjectVersion> {
    for await (const v of this.inner.listVersions(prefix)) yield v.deleteMarker ? v : { ...v, size: this.size(v.size) };
  }
  close(): void {
    if (!this.borrowed) this.inner.close();
  }
}

/** Encrypts bodies on put and decrypts them on get. Sizes are those of the plaintext. */
export class EncryptedStore extends BodyTransformStore {
  constructor(inner: ObjectStore, private readonly key: Buffer) {
    super(inner);
    if (key.length !== 32) throw new Error(`object-store encryption key must be 32 bytes, got ${key.length}`);
  }
  protected size(stored: number): number {
    return Math.max(0, stored - ENCRYPTION_OVERHEAD);
  }
  protected encode(key: string, body: Buffer): Buffer {
    return encryptBody(this.key, key, body);
  }
  protected decode(key: string, body: Buffer): Buffer {
    return decryptBody(this.key, key, body, this.location, this.keyOption);
  }
}

/** A store without a key: refuses to hand out encrypted bodies as if they were data. */
export class PlainGuardStore extends BodyTransformStore {
  protected size(stored: number): number {
    return stored;
  }
  protected encode(_key: string, body: Buffer): Buffer {
    return body;
  }
  protected decode(key: string, body: Buffer): Buffer {
    if (isEncryptedBody(body)) {
      throw new Error(`object ${key} in ${this.location} is encrypted: pass the prefix's key with ${this.keyOption}`);
    }
    return body;
  }
}
