// A program that embeds a node (embed-crash.ts runs it): opens the data directory given as its
// argument (with the open() options given as JSON after it, if any), then 8 writers put k/<writer>/<i> = v<i> as fast as the
// node takes them, each printing "<writer> <i>" once its put is acknowledged, until killed.
import { open } from '../embed/index.js';

const dir = process.argv[2];
if (!dir) throw new Error('usage: embed-writer <data-dir> [<options as JSON>]');
const node = await open({ ...JSON.parse(process.argv[3] ?? '{}'), dataDir: dir });
process.stdout.write('open\n');
const WRITERS = 8;
await Promise.all(
  Array.from({ length: WRITERS }, async (_, w) => {
    for (let i = 0; ; i++) {
      await node.put(`k/${w}/${i}`, `v${i}`);
      // stdout is a pipe: written synchronously on Linux, so a printed ack left the process.
      process.stdout.write(`${w} ${i}\n`);
    }
  }),
);
