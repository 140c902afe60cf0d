// etcdserverpb.WatchResponse, encoded by hand so that stored KeyValue records are copied into
// events without decoding; and etcd's fragmentation of large responses.
import protobuf from 'protobufjs';
import { writeHeader, type Header } from '../../../shared/mvcc/responses.js';
import { EventType, type Change } from '../../../shared/mvcc/history.js';

export interface WatchResponseFields {
  header: Header;
  watchId: number;
  created?: boolean;
  canceled?: boolean;
  compactRevision?: number;
  cancelReason?: string;
  fragment?: boolean;
  /** Encoded mvccpb.Event messages. */
  events?: readonly Buffer[];
}

/** mvccpb.Event: type=1, kv=2, prev_kv=3. */
export function encodeEvent(c: Change, prevKv?: Uint8Array): Buffer {
  const w = protobuf.Writer.create();
  if (c.type !== EventType.PUT) w.uint32(0x08).int32(c.type);
  w.uint32(0x12).bytes(c.kv);
  if (prevKv) w.uint32(0x1a).bytes(prevKv);
  return w.finish() as Buffer;
}

/** WatchResponse: header=1, watch_id=2, created=3, canceled=4, compact_revision=5, cancel_reason=6, fragment=7, events=11. */
export function encodeWatchResponse(f: WatchResponseFields): Buffer {
  const w = protobuf.Writer.create();
  writeHeader(w, 1, f.header);
  if (f.watchId) w.uint32(0x10).int64(f.watchId);
  if (f.created) w.uint32(0x18).bool(true);
  if (f.canceled) w.uint32(0x20).bool(true);
  if (f.compactRevision) w.uint32(0x28).int64(f.compactRevision);
  if (f.cancelReason) w.uint32(0x32).string(f.cancelReason);
  if (f.fragment) w.uint32(0x38).bool(true);
  if (f.events) for (const e of f.events) w.uint32(0x5a).bytes(e);
  return w.finish() as Buffer;
}

function fieldSize(len: number): number {
  let n = 1;
  for (let v = len; v >= 0x80; v = Math.floor(v / 128)) n++;
  return 1 + n + len;
}

/**
 * etcd's sendFragments: a response of at least `maxBytes` with two or more events is split
 * into several, each under the limit where possible (one event may exceed it alone); every
 * part but the last carries fragment=true.
 */
export function fragments(f: WatchResponseFields, maxBytes: number): Buffer[] {
  const events = f.events ?? [];
  const base = encodeWatchResponse({ ...f, events: [] }).length;
  const sizes = events.map((e) => fieldSize(e.length));
  const total = sizes.reduce((a, b) => a + b, base);
  if (total < maxBytes || events.length < 2) return [encodeWatchResponse(f)];
  const fragBase = base + 2; // fragment=true
  const out: Buffer[] = [];
  let idx = 0;
  while (idx < events.length) {
    let size = fragBase;
    const start = idx;
    for (; idx < events.length; idx++) {
      size += sizes[idx]!;
      if (idx > start && size >= maxBytes) break;
    }
    out.push(encodeWatchResponse({ ...f, events: events.slice(start, idx), fragment: idx < events.length }));
  }
  return out;
}
