/**
 * etcd's KV requests as protobufjs decodes them (camelCase fields, int64 as Long): what the
 * gateway receives and the storage executes, so both name them from here.
 */
import type protobuf from 'protobufjs';
import { num } from '../proto/index.js';
import type { RangeParams } from './range.js';

/* Decoded etcdserverpb messages (protobufjs: camelCase fields, int64 as Long). */
export type Int64 = number | protobuf.Long;
export interface PutRequest { key: Uint8Array; value: Uint8Array; lease: Int64; prevKv: boolean; ignoreValue: boolean; ignoreLease: boolean }
export interface DeleteRangeRequest { key: Uint8Array; rangeEnd: Uint8Array; prevKv: boolean }
export interface RangeRequest {
  key: Uint8Array; rangeEnd: Uint8Array; limit: Int64; revision: Int64; sortOrder: number; sortTarget: number;
  serializable: boolean; keysOnly: boolean; countOnly: boolean;
  minModRevision: Int64; maxModRevision: Int64; minCreateRevision: Int64; maxCreateRevision: Int64;
}
export interface Compare {
  result: number; target: number; key: Uint8Array; rangeEnd: Uint8Array; targetUnion?: string;
  version: Int64; createRevision: Int64; modRevision: Int64; value: Uint8Array; lease: Int64;
}
export interface RequestOp { request?: string; requestRange?: RangeRequest; requestPut?: PutRequest; requestDeleteRange?: DeleteRangeRequest; requestTxn?: TxnRequest }
export interface TxnRequest { compare: Compare[]; success: RequestOp[]; failure: RequestOp[] }
export interface CompactionRequest { revision: Int64; physical: boolean }

export function rangeParams(r: RangeRequest): RangeParams {
  return {
    key: r.key, rangeEnd: r.rangeEnd, limit: num(r.limit), revision: num(r.revision),
    sortOrder: r.sortOrder, sortTarget: r.sortTarget, keysOnly: r.keysOnly, countOnly: r.countOnly,
    minModRevision: num(r.minModRevision), maxModRevision: num(r.maxModRevision),
    minCreateRevision: num(r.minCreateRevision), maxCreateRevision: num(r.maxCreateRevision),
  };
}
