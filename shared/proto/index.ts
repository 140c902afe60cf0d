// Loads the .proto files once per process and builds grpc-js service definitions whose
// (de)serializers are protobufjs's generated code: several times cheaper than proto-loader's
// object conversion (docs/architecture.md#protobuf). A handler may answer with a ready Buffer, which is
// sent as is: the storage process encodes etcd responses once and the gateway forwards them.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import type { ServiceDefinition, MethodDefinition } from '@grpc/grpc-js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** proto/ at the repository root (this file runs from dist/shared/proto/). */
export const PROTO_DIR = path.resolve(here, '../../../proto');

const FILES = [
  'etcd/etcdserverpb/rpc.proto',
  'etcd/v3lockpb/v3lock.proto',
  'etcd/v3electionpb/v3election.proto',
  'etcd/leasepb/lease.proto',
  'kvs/storage.proto',
  'kvs/control.proto',
  'kvs/archiver.proto',
  'kvs/peer.proto',
];

function load(keepCase = false): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => {
    if (path.isAbsolute(target)) return target;
    // etcd's files import each other relative to proto/etcd; ours (kvs/...) from proto/
    if (!origin || target.startsWith('kvs/')) return path.join(PROTO_DIR, target);
    return path.join(PROTO_DIR, 'etcd', target);
  };
  root.loadSync(FILES, { keepCase });
  root.resolveAll();
  return root;
}

export const root = load();

let namedAsWritten: protobuf.Root | undefined;
/**
 * The same files with field names as the .proto files write them (`create_revision`, not
 * `createRevision`): the JSON gateway's names. Loaded on first use, by the gateway alone.
 */
export function rootAsWritten(): protobuf.Root {
  return (namedAsWritten ??= load(true));
}

const typeCache = new Map<string, protobuf.Type>();
export function type(name: string): protobuf.Type {
  let t = typeCache.get(name);
  if (!t) {
    t = root.lookupType(name);
    typeCache.set(name, t);
  }
  return t;
}

export function encode(typeName: string, value: object): Buffer {
  return type(typeName).encode(value).finish() as Buffer;
}

export function decode<T = any>(typeName: string, buf: Uint8Array): T {
  return type(typeName).decode(buf) as T;
}

function serializer(t: protobuf.Type) {
  return (value: unknown): Buffer => {
    if (Buffer.isBuffer(value)) return value;
    return t.encode(value as object).finish() as Buffer;
  };
}

function deserializer(t: protobuf.Type) {
  return (buf: Buffer) => t.decode(buf);
}

/**
 * A grpc-js ServiceDefinition for a fully qualified service name, e.g. 'etcdserverpb.KV'.
 * Methods named in `rawRequests` hand their handler the request bytes undecoded (the gateway
 * forwards writes to storage as they came).
 */
export function service(fullName: string, opts: { rawRequests?: readonly string[] } = {}): ServiceDefinition {
  const svc = root.lookupService(fullName);
  const def: Record<string, MethodDefinition<unknown, unknown>> = {};
  for (const method of svc.methodsArray) {
    method.resolve();
    const req = method.resolvedRequestType!;
    const res = method.resolvedResponseType!;
    def[method.name] = {
      path: `/${fullName}/${method.name}`,
      requestStream: !!method.requestStream,
      responseStream: !!method.responseStream,
      requestSerialize: serializer(req),
      requestDeserialize: opts.rawRequests?.includes(method.name) ? (b: Buffer) => b : deserializer(req),
      responseSerialize: serializer(res),
      responseDeserialize: deserializer(res),
      originalName: method.name[0].toLowerCase() + method.name.slice(1),
    };
  }
  return def as ServiceDefinition;
}

/** int64 fields decode as Long (lease ids need all 64 bits); revisions fit in a double. */
export function num(v: number | protobuf.Long | null | undefined): number {
  if (v == null) return 0;
  return typeof v === 'number' ? v : v.high * 4294967296 + (v.low >>> 0);
}

export function bigint(v: number | protobuf.Long | null | undefined): bigint {
  if (v == null) return 0n;
  if (typeof v === 'number') return BigInt(v);
  return BigInt.asIntN(64, (BigInt(v.high >>> 0) << 32n) | BigInt(v.low >>> 0));
}

/** A protobufjs-encodable int64 from a bigint (protobufjs takes Long or a decimal string). */
export function int64(v: bigint): string {
  return BigInt.asIntN(64, v).toString();
}

export type Long = protobuf.Long;
