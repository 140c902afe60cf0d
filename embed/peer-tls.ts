// open()'s peerServerTLS and peerClientTLS (the spec's PeerServerTLS, PeerClientTLS) as the
// peer agent reads TLS material: the files of --peer-tls-ca/-cert/-key, re-read when they
// change. A path is used as given; PEM is written to a directory of its own under run/
// (mode 0600), removed when the node closes. Either side alone serves as both (as `kvs run`'s
// one set of files does); peer TLS is mutual and TLS 1.3 only either way.
import fs from 'node:fs';
import path from 'node:path';
import type { PeerTlsFlags } from '../shared/tls/peer-port.js';
import type { ResolvedOptions } from './check-options.js';
import type { PeerTlsOptions } from './options.js';

const isPem = (v: string | Buffer) => Buffer.isBuffer(v) || v.trimStart().startsWith('-----BEGIN');

export interface PeerTlsSetup {
  /** The peer port's files, as kvs run's flags (`peer-tls-ca`, ...); none without peer TLS. */
  flags: Record<string, string>;
  /** The files to dial the leader with, when peerClientTLS is not peerServerTLS. */
  client?: PeerTlsFlags;
  remove(): void;
}

export function peerTlsFlags(o: ResolvedOptions): PeerTlsSetup {
  const server = o.peerServerTLS ?? o.peerClientTLS;
  const client = o.peerClientTLS && o.peerClientTLS !== server ? o.peerClientTLS : undefined;
  if (!server) return { flags: {}, remove: () => {} };
  let dir: string | undefined;
  const files = (side: string, tls: PeerTlsOptions): PeerTlsFlags => {
    const out: Record<string, string> = {};
    for (const which of ['ca', 'cert', 'key'] as const) {
      const v = tls[which];
      if (v === undefined || v === null || v === '') throw new TypeError(`kvs open(): ${side}.${which} is required (peer TLS is mutual: a CA, a certificate and its key)`);
      if (!isPem(v)) {
        out[which] = path.resolve(v as string);
        continue;
      }
      if (!dir) {
        fs.mkdirSync(path.join(o.dataDir, 'run'), { recursive: true });
        dir = fs.mkdtempSync(path.join(o.dataDir, 'run', 'peer-tls-'));
      }
      const file = path.join(dir, `${side}-${which}.pem`);
      fs.writeFileSync(file, v, { mode: 0o600 });
      out[which] = file;
    }
    return { peerTlsCa: out.ca, peerTlsCert: out.cert, peerTlsKey: out.key };
  };
  const s = files('peerServerTLS', server);
  const c = client ? files('peerClientTLS', client) : undefined;
  return {
    flags: { 'peer-tls-ca': s.peerTlsCa!, 'peer-tls-cert': s.peerTlsCert!, 'peer-tls-key': s.peerTlsKey! },
    client: c,
    remove: () => dir && fs.rmSync(dir, { recursive: true, force: true }),
  };
}
