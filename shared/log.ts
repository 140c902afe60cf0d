// One pino logger per process, tagged with the component name. JSON lines on stdout; the
// supervisor's children inherit its stdout, so one stream carries the whole node's log.
import pino, { type Logger } from 'pino';

export type { Logger };

export function createLogger(component: string, level = 'info'): Logger {
  return pino({ level, base: { component, pid: process.pid } });
}
