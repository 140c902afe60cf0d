// Progress of a long command: a line rewritten in place on a terminal, log lines otherwise
// (stderr either way; stdout carries the result). Inside a node, the component's own logger:
// its stdout is shared with the other processes, in the node's --log-format and --log-level.
import pino from 'pino';
import type { Logger } from './log.js';

/** `done` of `total` items of `phase` are finished. */
export type Progress = (phase: string, done: number, total: number) => void;

export function progressReporter(command: string, stream: NodeJS.WriteStream = process.stderr, componentLog?: Logger): Progress {
  if (stream.isTTY && !componentLog) {
    let lastPhase = '';
    return (phase, done, total) => {
      if (lastPhase && phase !== lastPhase) stream.write('\n');
      lastPhase = phase;
      stream.write(`\r${command}: ${phase} ${done}/${total}\x1b[K`);
      if (done === total) {
        stream.write('\n');
        lastPhase = '';
      }
    };
  }
  const log = componentLog ?? pino({ base: { component: command, pid: process.pid } }, stream);
  let lastLogged = 0;
  return (phase, done, total) => {
    // Start, end, and at most one line a second in between.
    const t = Date.now();
    if (done === 0 || done === total || t - lastLogged >= 1000) {
      lastLogged = t;
      log.info({ phase, done, total }, `${command}: ${phase} ${done}/${total}`);
    }
  };
}
