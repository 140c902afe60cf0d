// One pino logger per process, tagged with the component name, on stdout: the supervisor's
// children inherit its stdout, so one stream carries the whole node's log. `json` (the default
// off a terminal) is one JSON object a line; `pretty` is pino-pretty's readable line.
import pino, { type Logger } from 'pino';
import { prettyFactory } from 'pino-pretty';

export type { Logger };

export type LogFormat = 'json' | 'pretty';

export function createLogger(component: string, level = 'info', format: LogFormat = 'json'): Logger {
  const base = { component, pid: process.pid };
  if (format === 'json') return pino({ level, base });
  // `name` only feeds pino-pretty's `(name/pid)` header; the JSON format is left as it was.
  return pino({ level, base, name: component }, prettyDestination());
}

/**
 * pino-pretty's formatter in this process, written with synchronous writes: each line is on
 * stdout before `log.x()` returns, so a component's last lines survive process.exit (which
 * components call right after logging). pino-pretty as a transport would run in a worker
 * thread, and as a stream it passes lines through three Node streams on their way to the fd.
 */
function prettyDestination(): pino.DestinationStream {
  const prettify = prettyFactory({
    translateTime: 'SYS:HH:MM:ss.l',
    // The component is in the header already (as `name`).
    ignore: 'hostname,component',
    // Several processes share one stdout: one line a record (errors keep their stack lines).
    singleLine: true,
  });
  const stdout = pino.destination({ dest: 1, sync: true });
  return { write: (line: string) => stdout.write(prettify(line)) };
}
