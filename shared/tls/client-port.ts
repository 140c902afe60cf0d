// TLS on the client port: the PEM files of --client-tls-cert/-key/-ca, checked at startup and
// re-read when they change, so that a rotated certificate is served without a restart (etcd
// reads its files on every handshake; here every handshake checks whether they changed).
import fs from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { X509Certificate, createPrivateKey } from 'node:crypto';

export interface ClientTlsFiles {
  cert: string;
  key: string;
  /** With a CA, clients must present a certificate it signed (mutual TLS). */
  ca?: string;
}

/** The three flags as config holds them (any may be absent). */
export interface ClientTlsFlags {
  clientTlsCert?: string;
  clientTlsKey?: string;
  clientTlsCa?: string;
}

/**
 * The TLS files a config asks for, as absolute paths, or undefined for a plaintext port.
 * Throws one line naming the flag (and the file) for a half-given pair, a CA without a
 * certificate, or a file that cannot be read or is not valid PEM.
 */
export function clientTlsFiles(flags: ClientTlsFlags): ClientTlsFiles | undefined {
  const { clientTlsCert: cert, clientTlsKey: key, clientTlsCa: ca } = flags;
  if (!cert && !key) {
    if (ca) throw new Error(`--client-tls-ca ${ca} needs --client-tls-cert and --client-tls-key`);
    return undefined;
  }
  if (!key) throw new Error(`--client-tls-cert ${cert} needs --client-tls-key`);
  if (!cert) throw new Error(`--client-tls-key ${key} needs --client-tls-cert`);
  const files: ClientTlsFiles = { cert: path.resolve(cert), key: path.resolve(key), ...(ca ? { ca: path.resolve(ca) } : {}) };
  secureContextOptions(files); // fail now, naming the flag, rather than at the first handshake
  return files;
}

const FLAG: Record<keyof ClientTlsFiles, string> = { cert: '--client-tls-cert', key: '--client-tls-key', ca: '--client-tls-ca' };

function readPem(files: ClientTlsFiles, which: keyof ClientTlsFiles): Buffer {
  const file = files[which]!;
  let pem: Buffer;
  try {
    pem = fs.readFileSync(file);
  } catch (err) {
    throw new Error(`${FLAG[which]} ${file}: cannot read it: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  try {
    if (which === 'key') createPrivateKey(pem);
    else new X509Certificate(pem); // the first certificate of the file
  } catch (err) {
    throw new Error(`${FLAG[which]} ${file}: not a valid PEM ${which === 'key' ? 'private key' : 'certificate'}: ${(err as Error).message}`);
  }
  return pem;
}

/** Options for tls.createServer / setSecureContext from the files as they are now. */
export function secureContextOptions(files: ClientTlsFiles): tls.SecureContextOptions & tls.TlsOptions {
  const opts: tls.TlsOptions = {
    cert: readPem(files, 'cert'),
    key: readPem(files, 'key'),
    minVersion: 'TLSv1.2',
    maxVersion: 'TLSv1.3',
    ALPNProtocols: ['h2'],
  };
  if (files.ca) {
    opts.ca = readPem(files, 'ca');
    opts.requestCert = true;
    opts.rejectUnauthorized = true;
  }
  try {
    tls.createSecureContext(opts); // e.g. a key that does not belong to the certificate
  } catch (err) {
    throw new Error(`${FLAG.cert} ${files.cert} with ${FLAG.key} ${files.key}: ${(err as Error).message}`);
  }
  return opts;
}

/** What identifies a version of a file: a rotation by rename or by rewrite changes it. */
export function fingerprint(file: string): string {
  try {
    const s = fs.statSync(file);
    return `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
  } catch {
    return 'missing';
  }
}

/**
 * Keeps a TLS server's certificate in step with its files: `check()` (called as each
 * connection arrives, before its handshake; three stat calls) installs a new secure context
 * when a file changed. A set of files that does not load (a rotation half done, say a new
 * certificate beside the old key) leaves the current context in place and is tried again at
 * the next connection; `onError` hears of each distinct failure once.
 */
export class TlsFileWatch {
  private seen: string;
  private failed = '';

  constructor(
    private readonly files: ClientTlsFiles,
    private readonly apply: (opts: tls.TlsOptions) => void,
    private readonly onError: (err: Error) => void,
    private readonly onReload: () => void = () => {},
  ) {
    this.seen = this.state();
  }

  private state(): string {
    const { cert, key, ca } = this.files;
    return `${fingerprint(cert)}|${fingerprint(key)}|${ca ? fingerprint(ca) : ''}`;
  }

  check(): void {
    const now = this.state();
    if (now === this.seen || now === this.failed) return;
    try {
      this.apply(secureContextOptions(this.files));
      this.seen = now;
      this.failed = '';
      this.onReload();
    } catch (err) {
      this.failed = now;
      this.onError(err as Error);
    }
  }
}
