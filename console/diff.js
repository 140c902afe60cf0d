// A line diff of two texts (longest common subsequence), for the history view. Pure: also
// imported by the unit test (supervisor/console/diff.test.ts).

/** [{op: ' ' | '-' | '+', line}] turning `a` into `b`. Inputs past `maxLines` lines are compared whole. */
export function lineDiff(a, b, maxLines = 2000) {
  const x = a.split('\n');
  const y = b.split('\n');
  if (x.length > maxLines || y.length > maxLines) {
    return a === b ? x.map((line) => ({ op: ' ', line })) : [...x.map((line) => ({ op: '-', line })), ...y.map((line) => ({ op: '+', line }))];
  }
  // Common head and tail first: most edits touch a few lines.
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail);
  const ys = y.slice(head, y.length - tail);
  const n = xs.length;
  const m = ys.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = xs[i] === ys[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = x.slice(0, head).map((line) => ({ op: ' ', line }));
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (xs[i] === ys[j]) {
      out.push({ op: ' ', line: xs[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: '-', line: xs[i++] });
    else out.push({ op: '+', line: ys[j++] });
  }
  while (i < n) out.push({ op: '-', line: xs[i++] });
  while (j < m) out.push({ op: '+', line: ys[j++] });
  for (const line of x.slice(x.length - tail)) out.push({ op: ' ', line });
  return out;
}
