// How the gateway answers a failed call: etcd's status and message for an etcd error, INTERNAL
// with the cause for anything else.
import * as grpc from '@grpc/grpc-js';
import { EtcdError } from '../../shared/errors.js';

export function toServiceError(err: unknown): grpc.ServiceError | Partial<grpc.StatusObject> {
  if (err instanceof EtcdError) return { code: err.code, details: err.message };
  return { code: grpc.status.INTERNAL, details: `kvs: ${(err as Error)?.message ?? String(err)}` };
}
