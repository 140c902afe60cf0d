// A program that embeds a cluster member (integration/embed-cluster.test.ts runs it, so that a
// test can kill -9 it): opens the node with the JSON options of its argument, serves a client
// port when asked (`listen`), prints "open" once open() resolved, then answers calls of the
// Node API over its IPC channel: { id, op: 'put' | 'linearizableGet' | 'role', key?, value? }
// -> { id, result } or { id, error }.
import { open, type OpenOptions } from '../embed/index.js';

const arg = process.argv[2];
if (!arg) throw new Error('usage: embed-member <options as JSON>');
const { listen, ...options } = JSON.parse(arg) as OpenOptions & { listen?: string };
const node = await open(options);
if (listen) await node.serve({ listen });
process.stdout.write('open\n');

interface Call { id: number; op: 'put' | 'linearizableGet' | 'role'; key?: string; value?: string }
process.on('message', (c: Call) => {
  const answer = (async () => {
    if (c.op === 'put') return (await node.put(c.key!, c.value!)).revision;
    if (c.op === 'linearizableGet') return (await node.linearizableGet(c.key!))?.value.toString();
    return node.role();
  })();
  answer.then(
    (result) => process.send!({ id: c.id, result }),
    (err: Error) => process.send!({ id: c.id, error: `${err.constructor.name}: ${err.message}` }),
  );
});
