// The storage engine's free-space floor. LMDB is opened with a writable memory map (one
// memcpy per changed page instead of a malloc'd copy and a pwrite each at commit), and its
// file is sparse: a write through the map to a page the disk has no room for cannot return
// ENOSPC, the kernel kills the process with SIGBUS. So writes are refused, with an error the
// caller can act on, while the filesystem has less than a floor free. The WAL's own appends
// still report ENOSPC normally.
import fs from 'node:fs';
import { status } from '@grpc/grpc-js';
import { EtcdError } from '../../shared/errors.js';

/** Free bytes that must stay available on the database's filesystem for writes to proceed. */
export const MIN_FREE_BYTES = 64 * 1024 * 1024;
/**
 * A write refused below the floor (RESOURCE_EXHAUSTED for clients). A follower's storage also
 * throws it for replicated entries (Engine.appendReplicated); peer-attach.ts tells it by its class.
 */
export class FreeSpaceError extends EtcdError {
  constructor(readonly dir: string, readonly freeBytes: number, readonly minFreeBytes: number) {
    super(
      status.RESOURCE_EXHAUSTED,
      `kvs: storage refuses writes: ${mib(freeBytes)} free on the filesystem of ${dir}, ` +
        `and at least ${mib(minFreeBytes)} must stay free (the database writes through a memory map); free some space`,
    );
  }
}

/** How long a free-space reading is trusted (a statfs per batch would cost more than it saves). */
const RECHECK_MS = 100;

export class DiskSpace {
  private checkedAt = -Infinity;
  private refusal: FreeSpaceError | undefined;

  constructor(
    private readonly dir: string,
    private readonly minFree = MIN_FREE_BYTES,
    private readonly freeBytes: (dir: string) => number = statfsFree,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The error to fail writes with while the filesystem is below the floor, else undefined. */
  check(): FreeSpaceError | undefined {
    const t = this.now();
    if (t - this.checkedAt < RECHECK_MS) return this.refusal;
    this.checkedAt = t;
    const free = this.freeBytes(this.dir);
    this.refusal = free >= this.minFree ? undefined : new FreeSpaceError(this.dir, free, this.minFree);
    return this.refusal;
  }
}

function statfsFree(dir: string): number {
  const s = fs.statfsSync(dir);
  return s.bavail * s.bsize;
}

export const mib = (n: number): string => `${(n / 1024 / 1024).toFixed(1)} MiB`;
