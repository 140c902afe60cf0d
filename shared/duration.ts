// Durations as flags take them: a number with a unit (ms, s, m, h), e.g. 500ms, 30s, 10m.

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds of a duration such as "10m"; throws with the flag's name when malformed. */
export function parseDuration(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(text.trim());
  if (!m) throw new Error(`--${flag} must be a duration such as 500ms, 30s or 10m, got "${text}"`);
  const ms = Number(m[1]) * UNITS[m[2]!]!;
  if (ms <= 0) throw new Error(`--${flag} must be longer than 0, got "${text}"`);
  return ms;
}
