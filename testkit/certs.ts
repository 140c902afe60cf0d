// Test certificates, made with openssl in a temp dir: a CA, server certificates for 127.0.0.1,
// client certificates with a Common Name, and expired ones. `openssl ca` is used for the
// certificates it signs because it alone (in Debian 12's openssl 3.0) takes explicit
// -startdate/-enddate, which an expired certificate needs.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { runCommand, tempDir, type ClientTls, type Ctx } from './harness.js';

export interface CertFiles {
  cert: string;
  key: string;
}

export interface Ca extends CertFiles {
  dir: string;
  /** A server certificate for 127.0.0.1 and localhost, signed by this CA. */
  server(name: string, opts?: { cn?: string }): Promise<CertFiles & { serial: string }>;
  /** A client certificate with this Common Name; `expired` makes one valid only in 2020. */
  client(name: string, cn: string, opts?: { expired?: boolean }): Promise<CertFiles>;
  /**
   * A cluster node's peer certificate (--peer-tls-cert): server and client use
   * (extendedKeyUsage serverAuth,clientAuth), for 127.0.0.1 and localhost, CN = name;
   * `expired` makes one valid only in 2020.
   */
  peer(name: string, opts?: { expired?: boolean }): Promise<CertFiles>;
  /** What a client needs to trust this CA (and, with a client certificate, to present it). */
  clientTls(cert?: CertFiles): ClientTls;
}

const caConfig = (dir: string) => `[ca]
default_ca = test
[test]
database = ${dir}/db/index.txt
new_certs_dir = ${dir}/db
serial = ${dir}/db/serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = copy
[any]
commonName = supplied
`;

async function openssl(dir: string, args: string[]): Promise<string> {
  const r = await runCommand('openssl', args, { env: { OPENSSL_CONF: '/usr/lib/ssl/openssl.cnf' }, timeoutMs: 30_000 });
  if (r.exitCode !== 0) throw new Error(`openssl ${args.join(' ')} (in ${dir}) failed: ${r.stderr}`);
  return r.stdout;
}

/** A new CA (EC P-256: fast to make) in its own temp dir, removed when `t` finishes. */
export async function makeCa(t: Ctx, cn = 'kvs-test-ca'): Promise<Ca> {
  const dir = await tempDir(t, 'kvs-certs-');
  const p = (f: string) => path.join(dir, f);
  mkdirSync(p('db'));
  writeFileSync(p('db/index.txt'), '');
  writeFileSync(p('db/serial'), '1000\n');
  writeFileSync(p('ca.cnf'), caConfig(dir));
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  await openssl(dir, ['req', '-x509', ...ec, '-keyout', p('ca.key'), '-out', p('ca.crt'), '-days', '3650', '-subj', `/CN=${cn}`]);
  const sign = async (name: string, subj: string, ext: string[], dates: string[]): Promise<CertFiles> => {
    const key = p(`${name}.key`);
    const cert = p(`${name}.crt`);
    await openssl(dir, ['req', ...ec, '-keyout', key, '-out', p(`${name}.csr`), '-subj', subj, ...ext]);
    await openssl(dir, ['ca', '-batch', '-config', p('ca.cnf'), '-cert', p('ca.crt'), '-keyfile', p('ca.key'), '-in', p(`${name}.csr`), '-out', cert, '-notext', ...dates]);
    return { cert, key };
  };
  // Serialised: openssl ca keeps its serial and index in files.
  let queue: Promise<unknown> = Promise.resolve();
  const serially = <T>(fn: () => Promise<T>): Promise<T> => {
    const next = queue.then(fn);
    queue = next.catch(() => {});
    return next;
  };
  const ca: Ca = {
    dir,
    cert: p('ca.crt'),
    key: p('ca.key'),
    server: (name, opts = {}) =>
      serially(async () => {
        const files = await sign(name, `/CN=${opts.cn ?? name}`, ['-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-addext', 'extendedKeyUsage=serverAuth'], ['-days', '30']);
        const serial = (await openssl(dir, ['x509', '-in', files.cert, '-noout', '-serial'])).trim().replace(/^serial=/, '');
        return { ...files, serial };
      }),
    client: (name, cn, opts = {}) =>
      serially(() => sign(name, `/CN=${cn}`, ['-addext', 'extendedKeyUsage=clientAuth'], opts.expired ? ['-startdate', '20200101000000Z', '-enddate', '20200102000000Z'] : ['-days', '30'])),
    peer: (name, opts = {}) =>
      serially(() =>
        sign(
          name,
          `/CN=${name}`,
          ['-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-addext', 'extendedKeyUsage=serverAuth,clientAuth'],
          opts.expired ? ['-startdate', '20200101000000Z', '-enddate', '20200102000000Z'] : ['-days', '30'],
        ),
      ),
    clientTls: (c) => ({ ca: readFileSync(p('ca.crt')), ...(c ? { cert: readFileSync(c.cert), key: readFileSync(c.key) } : {}) }),
  };
  return ca;
}

/** A key pair for JWT tokens (etcd's --auth-token jwt,priv-key=...,pub-key=...), as PEM files. */
export interface JwtKeyFiles {
  priv: string;
  pub: string;
}

/**
 * A JWT signing key pair made with openssl in a temp dir removed when `t` finishes: RSA 2048
 * (PKCS#8) for RS* and PS*, EC P-256 (SEC 1) for ES256.
 */
export async function makeJwtKeys(t: Ctx, kind: 'rsa' | 'ec', name = 'jwt'): Promise<JwtKeyFiles> {
  const dir = await tempDir(t, 'kvs-jwt-keys-');
  const priv = path.join(dir, `${name}.key`);
  const pub = path.join(dir, `${name}.pub`);
  if (kind === 'rsa') await openssl(dir, ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', priv]);
  else await openssl(dir, ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', priv]);
  await openssl(dir, ['pkey', '-in', priv, '-pubout', '-out', pub]);
  return { priv, pub };
}
