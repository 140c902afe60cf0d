// TLS on the peer port (cluster mode): the PEM files of --peer-tls-ca/-cert/-key, checked at
// startup and re-read when they change. Peer TLS is mutual and TLS 1.3 only, in both
// directions: one certificate per node serves as its server certificate (the leader's peer
// port) and as its client certificate (a follower dialing the leader), so it must allow both
// uses. The versions are set on each secure context, never process-wide
// (tls.DEFAULT_MIN_VERSION): the same processes talk HTTPS to object stores that may only do
// TLS 1.2.
import path from 'node:path';
import fs from 'node:fs';
import tls from 'node:tls';
import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto';
import { fingerprint } from './client-port.js';

export interface PeerTlsFiles {
  ca: string;
  cert: string;
  key: string;
}

/** The three flags as config holds them (all or none given: config checks that first). */
export interface PeerTlsFlags {
  peerTlsCa?: string;
  peerTlsCert?: string;
  peerTlsKey?: string;
}

const FLAG: Record<keyof PeerTlsFiles, string> = { ca: '--peer-tls-ca', cert: '--peer-tls-cert', key: '--peer-tls-key' };
const SERVER_AUTH = '1.3.6.1.5.5.7.3.1';
const CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';
const ANY_EKU = '2.5.29.37.0';

/**
 * The peer TLS files a config asks for, as absolute paths, or undefined for a plaintext peer
 * port. Throws one line naming the flag and the file for a file that cannot be read, is not
 * PEM of the right kind, a key that is not the certificate's, or a certificate whose extended
 * key usage leaves out TLS server or client authentication.
 */
export function peerTlsFiles(flags: PeerTlsFlags): PeerTlsFiles | undefined {
  const { peerTlsCa: ca, peerTlsCert: cert, peerTlsKey: key } = flags;
  if (!ca && !cert && !key) return undefined;
  if (!ca || !cert || !key) throw new Error('peer TLS needs all three of --peer-tls-ca, --peer-tls-cert and --peer-tls-key');
  const files: PeerTlsFiles = { ca: path.resolve(ca), cert: path.resolve(cert), key: path.resolve(key) };
  loadPeerTls(files); // fail now, naming the flag, rather than at the first handshake
  return files;
}

function readPem(files: PeerTlsFiles, which: keyof PeerTlsFiles): Buffer {
  const file = files[which];
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new Error(`${FLAG[which]} ${file}: cannot read it: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

function parse<T>(files: PeerTlsFiles, which: keyof PeerTlsFiles, what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw new Error(`${FLAG[which]} ${files[which]}: not a valid PEM ${what}: ${(err as Error).message}`);
  }
}

/** What one load of the files gives: the context options, and this node's certificate. */
export interface PeerTlsLoad {
  options: tls.SecureContextOptions;
  context: tls.SecureContext;
  /** This node's certificate (the first of --peer-tls-cert). */
  cert: X509Certificate;
}

/** Reads and checks the files as they are now; throws one line naming the flag and file. */
export function loadPeerTls(files: PeerTlsFiles): PeerTlsLoad {
  const caPem = readPem(files, 'ca');
  const certPem = readPem(files, 'cert');
  const keyPem = readPem(files, 'key');
  parse(files, 'ca', 'certificate', () => new X509Certificate(caPem));
  const cert = parse(files, 'cert', 'certificate', () => new X509Certificate(certPem));
  const key: KeyObject = parse(files, 'key', 'private key', () => createPrivateKey(keyPem));
  if (!cert.checkPrivateKey(key)) throw new Error(`${FLAG.key} ${files.key} is not the private key of ${FLAG.cert} ${files.cert}`);
  const eku = cert.keyUsage; // extended key usage OIDs; undefined: any use
  if (eku && !eku.includes(ANY_EKU)) {
    const missing = [!eku.includes(SERVER_AUTH) && 'serverAuth', !eku.includes(CLIENT_AUTH) && 'clientAuth'].filter(Boolean);
    if (missing.length) {
      throw new Error(
        `${FLAG.cert} ${files.cert}: its extended key usage lacks ${missing.join(' and ')}; a node's peer certificate is its server and its client certificate (extendedKeyUsage=serverAuth,clientAuth)`,
      );
    }
  }
  const options: tls.SecureContextOptions = { ca: caPem, cert: certPem, key: keyPem, minVersion: 'TLSv1.3', maxVersion: 'TLSv1.3' };
  let context: tls.SecureContext;
  try {
    context = tls.createSecureContext(options);
  } catch (err) {
    throw new Error(`${FLAG.cert} ${files.cert} with ${FLAG.key} ${files.key}: ${(err as Error).message}`);
  }
  return { options, context, cert };
}

/** The little of a logger this needs (pino's shape). */
export interface TlsLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * This node's peer TLS material, kept in step with its files: `current()` (called before each
 * handshake, on either side; three stat calls) loads them again when one changed. A set that
 * does not load (a rotation half done, say a new certificate beside the old key) leaves the
 * previous one in use and is tried again when the files change again. It also says, once per
 * change, when this node's own certificate is expired or not yet valid: the other nodes refuse
 * it then, and this is the only place that can tell for sure.
 */
export class PeerTlsSource {
  private loaded: PeerTlsLoad;
  private seen: string;
  private failed = '';
  private validity = 'valid';
  /** Bumped at each reload, so that a server knows when to install the new context. */
  version = 0;

  constructor(
    readonly files: PeerTlsFiles,
    private readonly log?: TlsLog,
  ) {
    this.seen = this.state();
    this.loaded = loadPeerTls(files);
    this.checkValidity();
  }

  private state(): string {
    return `${fingerprint(this.files.cert)}|${fingerprint(this.files.key)}|${fingerprint(this.files.ca)}`;
  }

  current(): PeerTlsLoad {
    const now = this.state();
    if (now !== this.seen && now !== this.failed) {
      try {
        this.loaded = loadPeerTls(this.files);
        this.seen = now;
        this.failed = '';
        this.version++;
        this.log?.info({ cert: this.files.cert, expires: new Date(this.loaded.cert.validTo).toISOString() }, 'peer TLS files reloaded');
      } catch (err) {
        this.failed = now;
        this.log?.warn({ err: (err as Error).message }, 'peer TLS files changed but do not load; still using the previous ones');
      }
    }
    this.checkValidity();
    return this.loaded;
  }

  /** One line when this node's certificate turns expired (or not yet valid), and when it is fine again. */
  private checkValidity(): void {
    const { cert } = this.loaded;
    const now = Date.now();
    const v = now > Date.parse(cert.validTo) ? 'expired' : now < Date.parse(cert.validFrom) ? 'not yet valid' : 'valid';
    if (v === this.validity) return;
    this.validity = v;
    const fields = { cert: this.files.cert, subject: cert.subject.replace(/\n/g, ', '), validFrom: new Date(cert.validFrom).toISOString(), validTo: new Date(cert.validTo).toISOString() };
    if (v === 'valid') this.log?.info(fields, 'this node\'s peer TLS certificate is valid again');
    else this.log?.warn(fields, `this node's peer TLS certificate (--peer-tls-cert) is ${v}: the other nodes refuse it; replace the file (it is re-read when it changes)`);
  }
}
