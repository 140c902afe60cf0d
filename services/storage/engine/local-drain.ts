// A single node's drain, with no object store to wait for: execute the batch, append its
// entries to the WAL and commit, all in one LMDB write transaction; then answer.
import { META } from '../../../shared/mvcc/schema.js';
import { compactionPending } from '../mvcc/compaction.js';
import { Stage, stages } from '../../../shared/stages.js';
import type { WalRecord } from '../../../shared/wal/frame.js';
import type { WriteResult } from '../engine.js';
import type { EngineCore, Pending } from './core.js';

export function drainLocal(core: EngineCore, batch: Pending[]): void {
  const results: WriteResult[] = new Array(batch.length);
  const records: WalRecord[] = [];
  let index = core.index;
  let durable = false;
  let compacting = false;
  try {
    core.db.env.transactionSync(() => {
      index = core.executeBatch(batch, results, records, []);
      compacting = compactionPending(core.db); // read here, not after: see CompactionSteps.kick
      if (records.length) {
        stages?.stamp(Stage.STORAGE_EXECUTED, index);
        core.db.meta.putSync(META.appliedIndex, index);
        // fdatasync: the durability point
        if (core.walSpans) core.walSpans.around(batch, records.length, () => core.wal.appendSync(records));
        else core.wal.appendSync(records);
        stages?.stamp(Stage.STORAGE_FSYNCED, index);
        durable = true;
      }
    });
    core.index = index;
    if (stages && records.length) core.stampCommitted(batch, index);
  } catch (err) {
    if (durable) core.commitFailedAfterWal(err, records);
    return core.failBatch(batch, err);
  }
  if (records.length && core.debug) core.log.debug({ entries: records.length, requests: batch.length, index }, 'batch committed');
  core.feed.publish(records, core.executor.revision, index);
  for (let i = 0; i < batch.length; i++) core.finish(batch[i], results[i]);
  if (records.length) stages?.stamp(Stage.STORAGE_ANSWERED, index);
  core.compaction.kick(compacting);
}
