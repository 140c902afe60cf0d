// A progress request on a Watch stream whose watcher is still catching up from history: the
// answer must come after every event up to its revision (a client takes it as "you have seen
// everything through R", as Kubernetes' watch cache and the console's earlier incarnations do).
// etcd answers at once in 3.4 and waits for its watchers to sync since 3.5.8 (#15220); kvs
// waits. The history here takes several catch-up passes (more changes than one pass reads).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { onCleanup, startKvs } from '../testkit/harness.js';
import { EtcdClient } from '../shared/etcd-client.js';
import { num } from '../shared/proto/index.js';

test('a progress request is answered after the catch-up events of the stream’s watchers, not before', { timeout: 180_000 }, async (t) => {
  const node = await startKvs(t);
  const client = new EtcdClient({ endpoints: [node.endpoint] });
  onCleanup(t, () => client.close());
  const put = (key: string, value: string) => client.call('KV', 'Put', { key: Buffer.from(key), value: Buffer.from(value) });
  // The watched key early, then 240 transactions of 128 puts each (etcd's --max-txn-ops; 30,720
  // changes, three times what one catch-up pass reads), and the watched key's last write near the end.
  const first = num((await put('p/watched', 'first')).header.revision);
  for (let i = 0; i < 240; i++) {
    const success = Array.from({ length: 128 }, (_, j) => ({ requestPut: { key: Buffer.from(`p/filler/${j}`), value: Buffer.from(String(i)) } }));
    await client.call('KV', 'Txn', { success });
  }
  const last = num((await put('p/watched', 'last')).header.revision);
  await put('p/after', 'x');

  const call = client.client('Watch').watch(new grpc.Metadata()) as grpc.ClientDuplexStream<object, any>;
  onCleanup(t, () => call.cancel());
  const seen: string[] = [];
  const answered = new Promise<number>((resolve, reject) => {
    call.on('data', (r: any) => {
      for (const e of r.events ?? []) seen.push(`${num(e.kv.modRevision)}`);
      if (!r.created && !(r.events ?? []).length && num(r.watchId) === -1) resolve(num(r.header.revision));
    });
    call.on('error', reject);
  });
  call.write({ createRequest: { key: Buffer.from('p/watched'), startRevision: 1 } });
  call.write({ progressRequest: {} });
  const rev = await answered;
  assert.ok(rev >= last, `the progress answer's revision ${rev} covers the last write ${last}`);
  assert.deepEqual(seen, [String(first), String(last)], 'both events of the watched key came before the progress answer');
});
