// kvs's own version, and the etcd API version it speaks (reported by Maintenance.Status,
// as build metadata so semver parsers still read it as etcd 3.4).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const pkg = JSON.parse(readFileSync(fileURLToPath(new URL('../../package.json', import.meta.url)), 'utf8')) as { version: string };

export const VERSION = {
  kvs: pkg.version,
  etcdCompat: `3.4.0+kvs.${pkg.version}`,
} as const;
