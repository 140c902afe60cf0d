// `kvs restore-point`: record the object versions a restore of the prefix reads now, as a JSON
// file (see shared/objectstore/restore-point.ts).
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { recordRestorePoint, type RestorePoint } from '../../shared/objectstore/restore-point.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';

export async function writeRestorePoint(store: ObjectStore, file: string): Promise<RestorePoint> {
  if (!file) throw new Error('--output is required: the file to write the restore point to');
  const point = await recordRestorePoint(store);
  // Written whole or not at all.
  const tmp = path.join(path.dirname(path.resolve(file)), `.${path.basename(file)}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    await fs.writeFile(tmp, JSON.stringify(point, null, 2) + '\n', { flag: 'wx' });
    await fs.rename(tmp, file);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
  return point;
}
