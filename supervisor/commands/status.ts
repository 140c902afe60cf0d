// `kvs status`: what a prefix of the object store holds, read directly (no node needed).
import { listBranches, listCheckpoints, listWalObjects, readLatest } from '../../shared/objectstore/catalog.js';
import type { BranchRegistration, Latest } from '../../shared/objectstore/layout.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';

export interface StatusReport {
  location: string;
  latest?: Latest;
  checkpoints: number;
  walSegments: number;
  branches: BranchRegistration[];
}

export async function readStatus(store: ObjectStore): Promise<StatusReport> {
  const [latest, checkpoints, segments, branches] = await Promise.all([
    readLatest(store),
    listCheckpoints(store),
    listWalObjects(store),
    listBranches(store),
  ]);
  return { location: store.location, latest, checkpoints: checkpoints.length, walSegments: segments.length, branches };
}

export function formatStatus(r: StatusReport): string {
  const lines = [`object store: ${r.location}`];
  if (r.latest) {
    lines.push(`latest checkpoint: ${r.latest.checkpoint}`, `revision: ${r.latest.revision}`, `term: ${r.latest.term}`);
  } else {
    lines.push('latest checkpoint: none', 'revision: none', 'term: none');
  }
  lines.push(`checkpoints: ${r.checkpoints}`, `WAL segments: ${r.walSegments}`);
  if (r.branches.length === 0) lines.push('branch forks: none');
  else {
    lines.push(`branch forks: ${r.branches.length}`);
    for (const b of r.branches) lines.push(`  ${b.branchId}: ${b.checkpoint} (registered ${b.createdAt})`);
  }
  return lines.join('\n') + '\n';
}
