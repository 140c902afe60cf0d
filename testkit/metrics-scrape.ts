// Reading a node's /metrics (Prometheus text exposition) and probes in tests.
import assert from 'node:assert/strict';

export interface Sample { name: string; labels: Record<string, string>; value: number }

/** The samples of a Prometheus text exposition (enough of the format for these tests). */
export function samples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

export function value(all: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return all.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}

export async function get(addr: string, urlPath: string, init?: RequestInit): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${addr}${urlPath}`, init);
  return { status: res.status, body: await res.text() };
}

/** The node's metrics now. */
export async function scrape(addr: string): Promise<Sample[]> {
  return samples((await get(addr, '/metrics')).body);
}
