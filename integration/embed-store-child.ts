// A program that embeds a kvs node (the test embed-store.test.ts kills it with SIGKILL): opens
// the node with the options given as JSON in argv[2], then puts key0, key1, ... with four
// writers at once, printing `acked <key>` on stdout once each put resolved.
import { open } from '../embed/index.js';

const options = JSON.parse(process.argv[2]!);
const node = await open(options);
process.stdout.write('open\n');
let next = 0;
const writer = async () => {
  for (;;) {
    const key = `key${next++}`;
    await node.put(key, `value of ${key}`);
    process.stdout.write(`acked ${key}\n`);
  }
};
await Promise.all([writer(), writer(), writer(), writer()]);
