// Raw gRPC calls of the tests (request and response as bytes) that carry a token
// the test chooses, so what a node answers is not hidden by a client that logs in again.
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { encode, decode, service } from '../shared/proto/index.js';
import { onCleanup, type Ctx } from './harness.js';

type Unary = (req: Buffer, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: Buffer) => void) => void;

export type RawCall = (method: string, reqType: string, req: object, token?: string) => Promise<{ err?: grpc.ServiceError; res?: Buffer }>;

/** Raw calls of one etcd service on `endpoint`, each with an optional token. */
export function rawClient(t: Ctx, endpoint: string, svc: string): RawCall {
  const def = service(svc);
  for (const m of Object.values(def)) {
    m.requestSerialize = (b: unknown) => b as Buffer;
    m.responseDeserialize = (b: Buffer) => b;
  }
  const Ctor = grpc.makeGenericClientConstructor(def, svc);
  const c = new Ctor(endpoint, grpc.credentials.createInsecure()) as unknown as Record<string, Unary> & grpc.Client;
  onCleanup(t, () => c.close());
  return (method, reqType, req, token) => {
    const md = new grpc.Metadata();
    if (token) md.set('token', token);
    return new Promise((resolve) => c[method]!(encode(reqType, req), md, { deadline: Date.now() + 20_000 }, (err, res) => resolve({ err: err ?? undefined, res })));
  };
}

/** Authenticate through `auth` (a raw Auth client): the token. */
export async function login(auth: RawCall, name: string, password: string): Promise<string> {
  const { err, res } = await auth('Authenticate', 'etcdserverpb.AuthenticateRequest', { name, password });
  assert.ifError(err);
  return decode<{ token: string }>('etcdserverpb.AuthenticateResponse', res!).token;
}
