// watch / watch-fanout: one serial writer; each op is a Put and the delivery of its event to
// every watcher of the key, so an op's latency is put-to-last-event (the put's own answer
// included) and delivered events/s = ops/s x watchers per key.
//   watch:        one watcher on one prefix.
//   watch-fanout: 1,000 watchers over 100 prefixes (10 per prefix, on 10 streams, one watcher
//                 of each prefix per stream); the writer cycles through the prefixes.
import { key, prefix, prefixEnd } from '../keys.js';
import { fmt, type Op, type OpContext, type Workload } from '../workload.js';
import { WatchLoadStream, putRevision } from '../watch-load-stream.js';

interface Shape {
  prefixes: number;
  watchersPerPrefix: number;
}

function watchOp(area: string, shape: Shape) {
  return ({ kv, client, value }: OpContext): Op => {
    const areaOf = (p: number) => `${area}-${client}/${String(p).padStart(3, '0')}`;
    /** revision -> deliveries still expected; a resolver once the put has answered. */
    const expected = new Map<number, { left: number; done?: () => void }>();
    const onEvents = (_id: number, revision: number) => {
      const e = expected.get(revision) ?? { left: shape.watchersPerPrefix };
      if (--e.left === 0 && e.done) {
        expected.delete(revision);
        e.done();
      } else expected.set(revision, e);
    };
    const streams: WatchLoadStream[] = [];
    let ready: Promise<void> | undefined;
    const setup = async () => {
      for (let s = 0; s < shape.watchersPerPrefix; s++) {
        const stream = new WatchLoadStream(kv.endpoint, onEvents);
        streams.push(stream);
        for (let p = 0; p < shape.prefixes; p++) {
          const pre = prefix(areaOf(p));
          await stream.create(Buffer.from(pre, 'latin1'), prefixEnd(pre));
        }
      }
    };
    let n = 0;
    const op: Op = async () => {
      await (ready ??= setup());
      const i = n++;
      const res = await kv.put(key(areaOf(i % shape.prefixes), i), value);
      const rev = putRevision(res);
      const e = expected.get(rev) ?? { left: shape.watchersPerPrefix };
      if (e.left === 0) return res;
      await new Promise<void>((resolve) => {
        e.done = resolve;
        expected.set(rev, e);
      });
      return res;
    };
    op.close = () => {
      for (const s of streams) s.close();
    };
    return op;
  };
}

function watchWorkload(name: string, summary: string, shape: Shape): Workload {
  const perPut = shape.watchersPerPrefix;
  return {
    name,
    summary,
    clients: 1,
    preload: false,
    op: watchOp(name, shape),
    async measure(_target, run) {
      return { eventsPerSec: run.durationS > 0 ? (run.ops * perPut) / run.durationS : 0 };
    },
    metrics: [{ key: 'eventsPerSec', label: 'events/s', format: (v) => `${fmt.int(v)} events/s`, better: 'higher' }],
  };
}

export const watch = watchWorkload('watch', 'Put, 1 client; its event to 1 watcher of the prefix', { prefixes: 1, watchersPerPrefix: 1 });
export const watchFanout = watchWorkload('watch-fanout', 'Put, 1 client; 1,000 watchers over 100 prefixes (10 events per put)', {
  prefixes: 100,
  watchersPerPrefix: 10,
});
