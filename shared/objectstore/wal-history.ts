// Which uploaded WAL records are the history. Each cluster leader uploads under its own term
// (wal/<first>-<last>.t<term>.wal) and, before it serves, records where its term begins
// (term/<term>.json: the object store's end of the log when it took over, plus one). A deposed
// leader's uploads can still land after that — a PUT in flight, a slow archiver — and may hold
// records it never acknowledged. As in Raft, a newer term replaces the log from its start on:
// records of an older term at or past that index are not history, whenever they were written.
// Records below it agree across terms (a new leader's log matches the store's up to its start).

/** An object as listed: records first..last of one term. */
export interface ListedWal {
  key: string;
  first: bigint;
  last: bigint;
  term: number;
  size: number;
}

/** An object as the history uses it: its records first..last (`last` may be cut below `objectLast`). */
export interface HistoryWal extends ListedWal {
  /** The object's own last record (it holds first..objectLast; those past `last` are not history). */
  objectLast: bigint;
}

/**
 * The objects whose records make up the history, in index order, each cut where a newer term
 * begins. `starts` maps a term to the index its term/<term>-<start>.json names; a term without
 * one (term 0: a single node) begins at its first object. A leader may also upload records
 * below its start (those the store lacked, or all its WAL again): they repeat the history, so
 * they neither move its start nor cut older terms there.
 */
export function historyOf(objects: readonly ListedWal[], starts: ReadonlyMap<number, bigint>): HistoryWal[] {
  const begin = new Map<number, bigint>(starts);
  for (const o of objects) {
    if (starts.has(o.term)) continue;
    const b = begin.get(o.term);
    if (b === undefined || o.first < b) begin.set(o.term, o.first);
  }
  // cut(t): the smallest beginning of any newer term. Terms descending, carrying the minimum.
  const cut = new Map<number, bigint>();
  let min: bigint | undefined;
  for (const t of [...begin.keys()].sort((a, b) => b - a)) {
    if (min !== undefined) cut.set(t, min);
    const b = begin.get(t)!;
    if (min === undefined || b < min) min = b;
  }
  const out: HistoryWal[] = [];
  for (const o of objects) {
    const c = cut.get(o.term);
    const last = c !== undefined && o.last >= c ? c - 1n : o.last;
    if (last >= o.first) out.push({ ...o, last, objectLast: o.last });
  }
  return out.sort((a, b) => (a.first < b.first ? -1 : a.first > b.first ? 1 : a.last < b.last ? -1 : a.last > b.last ? 1 : 0));
}
