// Fuzz cases for the operator console on --metrics-addr (supervisor/console/api.ts): one
// HTTP/1.x connection each, its bytes written raw. Requests go to the console's paths (the page,
// its static files, every /api/ route, the probes, unknown and traversal paths) with any method,
// odd query strings (bad base64, huge or negative numbers, repeated and empty parameters),
// lying or missing headers (Authorization, X-Kvs-User, Origin, Content-Type, Content-Length)
// and broken JSON bodies; some connections are plain garbage. State-changing routes never get
// the X-Kvs-Console header exactly right, so no case compacts, checkpoints or restarts anything:
// the node must refuse them all, answer or close every connection, and keep its data.
import type { Case, CaseResult } from './cases.js';
import { exchange, outcomeOf, type Plan } from './http1-exchange.js';
import type { Rand } from './random.js';

export const CONSOLE_ANSWER_MS = 5000;

const READS = ['/api/session', '/api/cluster', '/api/activity', '/api/keys', '/api/key', '/api/history', '/api/history/earlier', '/api/watch', '/api/durability'];
const ACTIONS = ['/api/actions/compact', '/api/actions/checkpoint', '/api/actions/restart'];
const OTHERS = ['/', '/index.html', '/static/app.js', '/static/style.css', '/static/../package.json', '/static/%2e%2e/x', '/static/APP.JS', '/api/', '/api/login', '/api/nope', '/metrics', '/healthz', '/readyz', '//api/keys', '/api/keys/', '*'];

function b64ish(rand: Rand): string {
  return rand.pick([
    () => Buffer.from(rand.pick(['', 'a', 'app/', 'fuzz/', '\0', '\xff\xff'])).toString('base64'),
    () => rand.bytes(rand.int(40)).toString('base64'),
    () => rand.bytes(rand.int(20)).toString('latin1'),
    () => '%' + rand.bytes(2).toString('hex'),
    () => '====',
    () => 'A'.repeat(rand.pick([1, 3, 5000])),
  ])();
}

function number(rand: Rand): string {
  return rand.pick(['0', '1', '100', '1000', '1001', '-1', '1e3', '99999999999999999999', 'NaN', '', '0x10', String(rand.int(100_000))]);
}

function query(rand: Rand): string {
  const params: string[] = [];
  const n = rand.int(5);
  for (let i = 0; i < n; i++) {
    const name = rand.pick(['prefix', 'after', 'key', 'limit', 'keep', 'revision', 'x', '', 'prefix']);
    const value = ['limit', 'keep', 'revision'].includes(name) ? number(rand) : b64ish(rand);
    params.push(rand.chance(0.8) ? `${name}=${encodeURIComponent(value)}` : `${name}=${value}`.replace(/[\r\n ]/g, ''));
  }
  return params.length ? `?${params.join('&')}` : '';
}

function body(rand: Rand): string {
  return rand.pick([
    () => '',
    () => '{}',
    () => '[]',
    () => 'null',
    () => '{"name":"root","password":"x"}',
    () => `{"revision":${number(rand) || '1'}}`,
    () => '{"component":"storage"',
    () => '{"component":' + '['.repeat(rand.pick([10, 5000])),
    () => '{"revision":"' + 'x'.repeat(rand.pick([10, 70_000])) + '"}',
    () => rand.bytes(rand.int(200)).toString('latin1'),
  ])();
}

function headerLines(rand: Rand, action: boolean, bodyText: string): string[] {
  const h: string[] = [];
  if (rand.chance(0.9)) h.push(`Host: ${rand.pick(['127.0.0.1', 'kvs', 'evil.example', ''])}`);
  if (rand.chance(0.4)) h.push(`Authorization: ${rand.pick(['Bearer ', 'Bearer x.y', 'Basic abc', 'Bearer ' + 'a'.repeat(3000)])}`);
  if (rand.chance(0.3)) h.push(`X-Kvs-User: ${rand.pick(['root', '', 'a'.repeat(500), '\x01'])}`);
  // Never exactly "1" on a state-changing route: every action must be refused.
  if (rand.chance(0.6)) h.push(`X-Kvs-Console: ${action ? rand.pick(['0', '11', 'yes', '']) : rand.pick(['1', '0', ''])}`);
  if (rand.chance(0.5)) h.push(`Origin: ${rand.pick(['http://127.0.0.1', 'http://evil.example', 'null', 'not a url'])}`);
  if (rand.chance(0.6)) h.push(`Content-Type: ${rand.pick(['application/json', 'text/plain', 'application/x-www-form-urlencoded', ''])}`);
  const len = Buffer.byteLength(bodyText, 'latin1');
  if (bodyText || rand.chance(0.2)) h.push(`Content-Length: ${rand.chance(0.85) ? len : rand.pick([0, Math.max(0, len - 1), len + 5])}`);
  return h;
}

function plan(rand: Rand): Plan {
  if (rand.chance(0.05)) {
    const g = rand.pick([rand.bytes(rand.range(1, 300)), Buffer.from('\x16\x03\x01\x00\x05hello'), Buffer.from('GET / HTTP/9.9\r\n\r\n'), Buffer.from('GET /api/keys\r\n')]);
    return { kind: 'console-garbage', describe: `${g.length} bytes of garbage`, bytes: g };
  }
  const action = rand.chance(0.25);
  const path = action ? rand.pick(ACTIONS) : rand.chance(0.7) ? rand.pick(READS) : rand.pick(OTHERS);
  const method = rand.pick(action ? ['POST', 'POST', 'GET', 'PUT'] : ['GET', 'GET', 'GET', 'HEAD', 'POST', 'DELETE', 'OPTIONS']);
  const bodyText = method === 'POST' || rand.chance(0.1) ? body(rand) : '';
  const target = `${path}${query(rand)}`;
  const lines = [`${method} ${target} HTTP/${rand.pick(['1.1', '1.1', '1.0'])}`, ...headerLines(rand, action || path === '/api/login', bodyText)];
  const bytes = Buffer.from(`${lines.join('\r\n')}\r\n\r\n${bodyText}`, 'latin1');
  return { kind: action ? 'console-action' : path.startsWith('/api/') ? 'console-read' : 'console-other', describe: `${method} ${target.slice(0, 120)}${bodyText ? ` with ${bodyText.length} body bytes` : ''}`, bytes };
}

export function consoleCase(rand: Rand): Case {
  const p = plan(rand);
  const halfCloseMs = rand.pick([0, 100, 500]);
  let report = '';
  return {
    kind: p.kind,
    get describe() {
      return `${p.describe}; half-closed ${halfCloseMs} ms after${report}`;
    },
    writes: [p.bytes],
    async run(endpoint, answerMs = CONSOLE_ANSWER_MS): Promise<CaseResult> {
      const r = await exchange(endpoint, [{ bytes: p.bytes, pauseMs: 0 }], halfCloseMs, answerMs);
      const text = r.received.toString('latin1');
      const statuses = [...text.matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => m[1]);
      report = `; answered ${statuses.join(', ') || `${r.received.length} bytes`}`;
      // An action that got through would have changed the node: the fuzzer never sends one.
      if (p.kind === 'console-action' && statuses.some((s) => s === '200')) throw new Error(`a state-changing request was accepted: ${p.describe}`);
      return outcomeOf(r);
    },
  };
}
