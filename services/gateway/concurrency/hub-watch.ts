// Watches for the Lock and Election recipes, registered on the gateway's watch hub: the hub
// delivers each committed revision of the watched keys (catching up from history first when
// the start revision is in the past), and the recipe takes them one batch at a time.
import { decode } from '../../../shared/proto/index.js';
import { Errors } from '../../../shared/errors.js';
import { EventType } from '../../../shared/mvcc/history.js';
import type { Hub } from '../watch/hub.js';
import { watchRange } from '../watch/key-range.js';
import type { KeyValueMessage, WatchBatch, WatchStream } from './backend.js';

export function hubWatch(hub: Hub) {
  return (key: Buffer, rangeEnd: Buffer | undefined, fromRev: number): WatchStream => {
    const batches: WatchBatch[] = [];
    let failure: Error | undefined;
    let waiting: { resolve(b: WatchBatch): void; reject(e: Error): void } | undefined;
    const wake = () => {
      if (!waiting) return;
      const w = waiting;
      if (batches.length) {
        waiting = undefined;
        w.resolve(batches.shift()!);
      } else if (failure) {
        waiting = undefined;
        w.reject(failure);
      }
    };
    const watcher = hub.watch(watchRange(key, rangeEnd ?? Buffer.alloc(0)), Math.max(1, fromRev), {
      deliver(changes, revision) {
        batches.push({
          revision,
          events: changes.map((c) => ({ type: c.type === EventType.DELETE ? 'DELETE' : 'PUT', kv: decode<KeyValueMessage>('mvccpb.KeyValue', c.kv) })),
        });
        wake();
        return true;
      },
      compacted() {
        failure = Errors.compacted;
        wake();
      },
    });
    return {
      next: () =>
        new Promise<WatchBatch>((resolve, reject) => {
          waiting = { resolve, reject };
          wake();
        }),
      cancel: () => watcher.cancel(),
    };
  };
}
