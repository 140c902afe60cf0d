import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { stripVTControlCharacters } from 'node:util';

// A process that logs and exits at once, as components do when they stop: its lines must be
// on stdout anyway.
function logAndExit(format: string): string {
  const script = `
    import { createLogger } from ${JSON.stringify(new URL('./log.js', import.meta.url).href)};
    const log = createLogger('storage', 'info', ${JSON.stringify(format)});
    for (let i = 0; i < 500; i++) log.info({ i, socket: '/tmp/s.sock' }, 'line ' + i);
    log.debug('not at info');
    log.flush?.();
    process.exit(0);`;
  return stripVTControlCharacters(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }));
}

test('pretty: readable lines with time, level, component, message and fields; none lost on process.exit', () => {
  const lines = logAndExit('pretty').trimEnd().split('\n');
  assert.equal(lines.length, 500);
  assert.match(lines[0]!, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(storage\/\d+\): line 0 \{"i":0,"socket":"\/tmp\/s.sock"\}$/);
  assert.match(lines[499]!, /line 499/);
  assert.throws(() => JSON.parse(lines[0]!));
});

test('json: one JSON object a line, as before', () => {
  const lines = logAndExit('json').trimEnd().split('\n');
  assert.equal(lines.length, 500);
  const first = JSON.parse(lines[0]!);
  assert.deepEqual(Object.keys(first), ['level', 'time', 'component', 'pid', 'i', 'socket', 'msg']);
  assert.equal(first.component, 'storage');
  assert.equal(first.level, 30);
  assert.equal(JSON.parse(lines[499]!).msg, 'line 499');
});
