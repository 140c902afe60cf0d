// Progress of a long command: a line rewritten in place on a terminal, log lines otherwise
// (stderr either way; stdout carries the result).
import pino from 'pino';

/** `done` of `total` items of `phase` are finished. */
export type Progress = (phase: string, done: number, total: number) => void;

export function progressReporter(command: string, stream: NodeJS.WriteStream = process.stderr): Progress {
  if (stream.isTTY) {
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
  const log = pino({ base: { component: command, pid: process.pid } }, stream);
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
