// A program that embeds a node (embed-writer.ts), killed with SIGKILL under load, and what it
// saw acknowledged: for the kill -9 tests of embed-process.test.ts and embed-store.test.ts.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { REPO_ROOT, type Ctx } from '../testkit/process.js';
import type { Node, OpenOptions } from '../embed/index.js';

/** Writer -> the last i it saw acknowledged (it acknowledges k/<writer>/0..i in order). */
export type Acked = Map<number, number>;

/**
 * Runs embed-writer.ts on `dataDir` (with `options` beside it), kills it with SIGKILL once
 * `acks` puts were acknowledged, and resolves with what was acknowledged.
 */
export async function killWriterAfter(t: Ctx, dataDir: string, acks: number, options: Omit<OpenOptions, 'dataDir'> = {}): Promise<Acked> {
  const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist/integration/embed-writer.js'), dataDir, JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  const acked: Acked = new Map();
  let count = 0;
  let stderr = '';
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
  await new Promise<void>((resolve, reject) => {
    let buffered = '';
    child.stdout.on('data', (b: Buffer) => {
      buffered += b.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        const [w, i] = line.split(' ').map(Number);
        if (line === 'open') continue;
        acked.set(w!, i!);
        if (++count === acks) {
          child.kill('SIGKILL');
          resolve();
        }
      }
    });
    void exited.then(() => reject(new Error(`the writer exited before ${acks} acks: ${stderr}`)));
  });
  const signal = await exited;
  if (signal !== 'SIGKILL') throw new Error(`the writer ended by ${signal}, not by SIGKILL`);
  return acked;
}

/** How many acknowledged puts `node` lacks. */
export async function lostPuts(node: Node, acked: Acked): Promise<number> {
  let missing = 0;
  for (const [w, last] of acked) {
    for (let i = 0; i <= last; i++) {
      const kv = await node.get(`k/${w}/${i}`);
      if (kv?.value.toString() !== `v${i}`) missing++;
    }
  }
  return missing;
}
