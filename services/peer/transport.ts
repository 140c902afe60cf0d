// The peer port's plumbing: its calls on our own HTTP/2 gRPC (the server of the client port,
// shared/grpc/server.ts, and the client side of the internal streams,
// shared/grpc/stream-channel.ts), plaintext or with --peer-tls-ca/-cert/-key mutual TLS, TLS 1.3
// only, both directions (docs/security.md#peer-tls). Every cluster write crosses the peer
// port twice on its way to the slowest follower and back; on @grpc/grpc-js the peer agents
// spent 17–30 % of their busy time in it (docs/perf/cluster.md#levers-on-the-cluster-path).
//
// kvs does the TLS itself on both sides and hands the HTTP/2 layer the result:
//  - the leader's side: the peer port is a net.Server of ours. Each connection's first byte
//    says whether the peer speaks TLS (a handshake record starts with 0x16); a connection that
//    matches this node's setup goes to a node TLS server (TLS 1.3 only, client certificate
//    requested and checked by us) and, once authenticated, into the gRPC server. A peer this
//    node refuses (no TLS on a TLS port, TLS on a plaintext port, a certificate that does not
//    verify) is logged once per condition, and where it can still be answered it is: a gRPC
//    UNAUTHENTICATED status saying why, so the dialing node can log it too (it never reaches a
//    Peer service).
//  - the follower's side: each connection is made with the secure context of the files as they
//    are now (TLS 1.3 only, this node's certificate), and a failed handshake is named in one
//    line per condition.
// Certificate files are re-read when they change, before each handshake on either side.
import net from 'node:net';
import tls from 'node:tls';
import http2 from 'node:http2';
import { status } from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { splitHostPort } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { service } from '../../shared/proto/index.js';
import { PeerTlsSource, peerTlsFiles, type PeerTlsFlags } from '../../shared/tls/peer-port.js';
import { StreamChannel, type H2Stream } from '../../shared/grpc/stream-channel.js';
import type { GrpcServer } from '../../shared/grpc/server.js';
import type { BatchCalls } from '../../shared/batch-link/link.js';

/** kvs.peer.Peer's methods, for the calls of a follower (and of tests). */
export const PEER = service('kvs.peer.Peer');

/**
 * A follower's connection to its leader: a dead leader (or a partition) is noticed by the
 * follower's own silence check on Follow (follower.ts) and, for the other calls, by this PING.
 */
const KEEPALIVE = { idleMs: 10_000, timeoutMs: 5_000 };

/** Every refusal the peer port answers starts so (a follower recognises them by it). */
const REFUSED = 'kvs: peer connection refused by ';
/** A connection that sends nothing (or does not finish its handshake) for this long is closed. */
const HANDSHAKE_TIMEOUT_MS = 10_000;
/** A condition already logged is logged again after this long (with how often it recurred). */
const RELOG_MS = 10 * 60_000;

/**
 * One log line per condition (a refused peer, a failed handshake), not one per attempt: a
 * follower retries every few hundred milliseconds. The same condition is logged again after
 * RELOG_MS, with the count of repeats meanwhile.
 */
export class ConditionLog {
  private readonly seen = new Map<string, { at: number; repeats: number }>();

  constructor(private readonly log: Pick<Logger, 'warn' | 'error'>) {}

  report(level: 'warn' | 'error', key: string, obj: Record<string, unknown>, msg: string): void {
    const now = Date.now();
    const s = this.seen.get(key);
    if (s && now - s.at < RELOG_MS) {
      s.repeats++;
      return;
    }
    if (this.seen.size >= 1000) this.seen.clear(); // a scanner's many addresses: bounded
    this.seen.set(key, { at: now, repeats: 0 });
    this.log[level](s?.repeats ? { ...obj, repeatsSinceLastLine: s.repeats } : obj, msg);
  }

  /** Forgets the conditions whose keys start with `prefix` (the next failure is news again). */
  clear(prefix: string): void {
    for (const k of this.seen.keys()) if (k.startsWith(prefix)) this.seen.delete(k);
  }
}

export interface PeerCredentials {
  tls: boolean;
  /** This node's peer TLS files (with TLS): its peer port's, and its dial's unless `clientSource`. */
  source?: PeerTlsSource;
  /** Other files for dialing the leader (an embedded node's peerClientTLS); default `source`. */
  clientSource?: PeerTlsSource;
  /** One line per condition, for both sides of the peer port. */
  conditions: ConditionLog;
  /**
   * A call to the leader failed before it was served: a refusal by the leader (its reason)
   * is logged once; anything else is the caller's to handle.
   */
  callFailed(err: { code?: number; details?: string }, leader: { nodeId: string; peerUrl: string }): void;
  /** The leader served this node: a later failure is news again. */
  served(leader: { peerUrl: string }): void;
}

/** `clientFiles`: other files to dial the leader with than the peer port's (both are checked as the flags' are). */
export function peerCredentials(cfg: Pick<Config, 'peerTlsCa' | 'peerTlsCert' | 'peerTlsKey'>, log: Logger, clientFiles?: PeerTlsFlags): PeerCredentials {
  const files = peerTlsFiles(cfg);
  const conditions = new ConditionLog(log);
  const source = files ? new PeerTlsSource(files, log) : undefined;
  const client = clientFiles && peerTlsFiles(clientFiles);
  if (client && !source) throw new Error('peer TLS to dial the leader needs peer TLS on this node\'s peer port too');
  return {
    tls: source !== undefined,
    source,
    clientSource: client ? new PeerTlsSource(client, log) : undefined,
    conditions,
    callFailed(err, leader) {
      if (err.code !== status.UNAUTHENTICATED || !err.details?.startsWith(REFUSED)) return;
      conditions.report('error', `dial ${leader.peerUrl} ${err.details}`, { leader: leader.nodeId, at: leader.peerUrl }, `cannot join the cluster: the leader refused this node: ${err.details.slice('kvs: '.length)}`);
    },
    served(leader) {
      conditions.clear(`dial ${leader.peerUrl} `);
    },
  };
}

/** Metadata of every peer call: the epoch of the leadership the caller found in the lock. */
export const EPOCH_HEADER = 'kvs-leader-epoch';

/** Whether a peer call was meant for the leadership of `epoch` (lock.ts). */
export function callForEpoch(call: { metadata: { get(key: string): unknown[] } }, epoch: string): boolean {
  return (call.metadata.get(EPOCH_HEADER)[0] ?? '') === epoch;
}

// ---- the dialing side ----------------------------------------------------------------------

/**
 * A follower's calls to the leader at `addr`, which it found in the lock with `epoch`: one
 * connection, made when a call needs it and again after it broke. Calls that fail carry
 * gRPC's status (`code`, `details`), as grpc-js's do.
 */
export class PeerChannel {
  private readonly channel: StreamChannel;

  constructor(addr: string, creds: PeerCredentials, epoch: string) {
    const hp = splitHostPort(addr);
    if (!hp) throw new Error(`peer address ${addr}: expected host:port`);
    const [host, port] = [hp[0], Number(hp[1])];
    const source = creds.clientSource ?? creds.source;
    const dial = source ? () => dialTls(addr, host, port, source, creds.conditions) : () => net.connect({ host, port });
    this.channel = new StreamChannel(dial, {
      headers: { ':scheme': source ? 'https' : 'http', ':authority': addr, [EPOCH_HEADER]: epoch },
      keepalive: KEEPALIVE,
    });
  }

  /** Peer.Follow: the leader's stream of entries and this follower's ACKs. */
  follow<Req, Res>(): H2Stream<Req, Res> {
    return this.channel.stream(PEER.Follow as any);
  }

  /** Peer.Forward / Peer.ForwardLease, for a batch link. */
  batchCalls(method: 'Forward' | 'ForwardLease'): BatchCalls {
    return { open: () => this.channel.stream(PEER[method] as any), close: () => {} };
  }

  /** Peer.GetRevision: the leader's committed position, for a linearizable read here. */
  getRevision(timeoutMs: number): Promise<{ index: unknown; revision: unknown; term: unknown }> {
    return this.channel.unary(PEER.GetRevision as any, {}, timeoutMs) as Promise<{ index: unknown; revision: unknown; term: unknown }>;
  }

  close(): void {
    this.channel.close();
  }
}

/**
 * Mutual TLS 1.3 to the leader with the files as they are now. The leader's certificate must
 * be signed by --peer-tls-ca and name the host dialed (its --advertise-peer), as any TLS
 * server's. A handshake that fails is logged once per condition; a connection that fails
 * before it (nothing listening) is the caller's to retry.
 */
function dialTls(addr: string, host: string, port: number, source: PeerTlsSource, conditions: ConditionLog): net.Socket {
  const { context } = source.current();
  const socket = tls.connect({
    host,
    port,
    secureContext: context,
    ALPNProtocols: ['h2'],
    // No SNI for an IP address (RFC 6066; node warns); the identity check uses `host`.
    ...(net.isIP(host) ? {} : { servername: host }),
  });
  let connected = false;
  let secured = false;
  socket.once('connect', () => (connected = true));
  socket.once('secureConnect', () => (secured = true));
  socket.on('error', (err: Error & { code?: string; reason?: string }) => {
    if (secured || !connected) return; // the session hears it too, and fails its calls
    const why = handshakeFailure(err);
    conditions.report('error', `dial ${addr} ${why}`, { at: addr, code: err.code, err: err.reason ?? err.message }, `cannot connect to the leader at ${addr}: ${why}`);
  });
  return socket;
}

const NOT_OUR_CA = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
]);

/** A failed handshake as the dialing follower says it (the leader's certificate, or its port). */
function handshakeFailure(err: Error & { code?: string; reason?: string }): string {
  const code = err.code ?? '';
  const text = err.reason ?? err.message;
  if (NOT_OUR_CA.has(code)) return `its peer TLS certificate is not signed by this node's --peer-tls-ca (${text}); every node needs the same CA`;
  if (code === 'CERT_HAS_EXPIRED') return 'its peer TLS certificate has expired';
  if (code === 'CERT_NOT_YET_VALID') return 'its peer TLS certificate is not yet valid';
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return `its peer TLS certificate does not name the address it is dialed at (${text}); its subjectAltName must include its --advertise-peer host`;
  if (code === 'INVALID_PURPOSE') return 'its peer TLS certificate is not for TLS servers (extended key usage without serverAuth)';
  if (/WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG|RECORD_LAYER_FAILURE|HTTP_REQUEST/.test(code) || /wrong version number/.test(text)) {
    return 'its peer port does not speak TLS: the leader runs without peer TLS and this node with it (every node uses --peer-tls-ca/--peer-tls-cert/--peer-tls-key, or none)';
  }
  if (/PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL/.test(code)) return `it does not do TLS 1.3 (${text})`;
  return `the TLS handshake failed (${text})`;
}

// ---- the listening side --------------------------------------------------------------------

export interface PeerListener {
  /** The port it listens on (the one asked for, or the one the system chose for port 0). */
  port: number;
  /** Stops accepting connections (open ones are the grpc server's to end). */
  close(): void;
}

/**
 * Serves `server` (the Peer service) on `addr` (host:port, IPv6 in brackets): plaintext, or
 * mutual TLS 1.3 with `creds.source`. Connections are let in only as this node's setup says;
 * the others are refused with one log line per peer host and condition.
 */
export async function listenPeer(server: GrpcServer, addr: string, creds: PeerCredentials, nodeId: string, log: Logger): Promise<PeerListener> {
  const hp = splitHostPort(addr);
  if (!hp) throw new Error(`--peer-listen ${addr}: expected host:port`);
  const source = creds.source;
  const hostOf = new WeakMap<net.Socket, string>();
  const refused = (host: string, why: string, obj: Record<string, unknown> = {}) =>
    creds.conditions.report('warn', `peer ${host} ${why}`, { peer: host, ...obj }, `refused a peer connection from ${host}: ${why}`);

  let tlsServer: tls.Server | undefined;
  if (source) {
    let installed = source.version;
    tlsServer = tls.createServer({
      ...source.current().options,
      requestCert: true,
      // Checked below: a refused certificate gets an answer saying so, not a silent close.
      rejectUnauthorized: false,
      ALPNProtocols: ['h2'],
      handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
    });
    tlsServer.prependListener('connection', () => {
      // Before the TLS socket is made: this handshake uses the files as they are now.
      const { options } = source.current();
      if (source.version !== installed) {
        tlsServer!.setSecureContext(options);
        installed = source.version;
      }
    });
    tlsServer.on('secureConnection', (socket: tls.TLSSocket & { _parent?: net.Socket }) => {
      const host = hostOf.get(socket._parent ?? socket) ?? String(socket.remoteAddress);
      if (!socket.authorized) {
        const cert = socket.getPeerCertificate();
        const why = certificateRefusal(String(socket.authorizationError ?? ''), cert);
        refused(host, `its certificate ${why}`, { code: String(socket.authorizationError), subject: cert?.subject?.CN, validTo: cert?.valid_to });
        return refuse(socket, `${REFUSED}${nodeId}: this node's peer TLS certificate ${why}`);
      }
      if (socket.alpnProtocol !== 'h2') {
        refused(host, 'it did not negotiate HTTP/2 (ALPN h2)');
        return socket.destroy();
      }
      server.inject(socket);
    });
    tlsServer.on('tlsClientError', (err: Error & { code?: string; reason?: string }, socket: tls.TLSSocket & { _parent?: net.Socket }) => {
      const host = hostOf.get(socket._parent ?? socket) ?? String(socket.remoteAddress);
      const code = err.code ?? '';
      let why: string;
      if (code === 'ECONNRESET' || /socket hang up/.test(err.message)) {
        why = 'it closed the connection during the TLS handshake: it probably refused this node\'s peer TLS certificate (not signed by the CA it trusts, or expired)';
      } else if (/UNSUPPORTED_PROTOCOL|VERSION_TOO_LOW|PROTOCOL_VERSION/.test(code)) {
        why = `it does not offer TLS 1.3, which the peer port requires (${err.reason ?? err.message})`;
      } else if (code === 'ERR_TLS_HANDSHAKE_TIMEOUT') {
        why = 'its TLS handshake timed out';
      } else {
        why = `the TLS handshake failed (${err.reason ?? err.message})`;
      }
      refused(host, why, { code });
    });
  }

  const opening = new Set<net.Socket>();
  // noDelay: a replicated batch and its ACK are small writes; Nagle would hold them for an ACK.
  const listener = net.createServer({ noDelay: true }, (socket) => {
    const host = String(socket.remoteAddress); // read now: node forgets it once the socket closes
    opening.add(socket);
    const onError = () => socket.destroy();
    socket.on('error', onError);
    socket.setTimeout(HANDSHAKE_TIMEOUT_MS, () => socket.destroy());
    socket.once('close', () => opening.delete(socket));
    socket.once('data', (first: Buffer) => {
      opening.delete(socket);
      socket.setTimeout(0);
      socket.off('error', onError);
      socket.pause();
      socket.unshift(first);
      const speaksTls = first[0] === 0x16; // a TLS handshake record
      if (tlsServer) {
        if (speaksTls) {
          hostOf.set(socket, host);
          tlsServer.emit('connection', socket);
          return;
        }
        refused(host, 'it does not use TLS, and peer TLS is on here (every node uses --peer-tls-ca/--peer-tls-cert/--peer-tls-key, or none)');
        // An HTTP/2 client (a kvs node without peer TLS) gets the reason as a gRPC status.
        return refuse(socket, `${REFUSED}${nodeId}: its peer port requires mutual TLS and this node dialed without TLS (every node uses --peer-tls-ca/--peer-tls-cert/--peer-tls-key, or none)`);
      }
      if (speaksTls) {
        refused(host, 'it uses TLS, and peer TLS is off here (every node uses --peer-tls-ca/--peer-tls-cert/--peer-tls-key, or none)');
        // Not a TLS record: the dialing node's TLS says "wrong version number", which it reads
        // as a peer port without TLS.
        socket.on('error', () => {});
        socket.end(`${REFUSED}${nodeId}: peer TLS is off on this port\n`);
        setTimeout(() => socket.destroy(), 1000).unref();
        return;
      }
      server.inject(socket); // paused above with its first bytes put back: inject reads them
    });
  });
  await new Promise<void>((resolve, reject) => {
    listener.once('error', (err) => reject(new Error(`--peer-listen ${addr}: ${err.message}`)));
    listener.listen(hp[1], hp[0], () => resolve());
  });
  listener.on('error', (err) => log.error({ err: err.message }, 'peer port listener failed'));
  return {
    port: (listener.address() as net.AddressInfo).port,
    close() {
      listener.close();
      for (const s of opening) s.destroy();
      opening.clear();
    },
  };
}

/** Why a peer's certificate does not verify, from node's verification code. */
function certificateRefusal(code: string, cert: tls.PeerCertificate | undefined): string {
  if (!cert || Object.keys(cert).length === 0) return 'was not sent (mutual TLS needs one)';
  if (code === 'CERT_HAS_EXPIRED') return `has expired (${cert.valid_to})`;
  if (code === 'CERT_NOT_YET_VALID') return `is not yet valid (${cert.valid_from})`;
  if (NOT_OUR_CA.has(code)) return `is not signed by the cluster's CA (--peer-tls-ca) (${code})`;
  if (code === 'INVALID_PURPOSE') return 'is not for TLS clients (extended key usage without clientAuth)';
  return `does not verify (${code})`;
}

/**
 * Answers every request of a refused connection with UNAUTHENTICATED and `details`, then
 * closes it. The connection never reaches the Peer service.
 */
function refuse(socket: net.Socket, details: string): void {
  const h2 = http2.createServer();
  const timer = setTimeout(() => socket.destroy(), HANDSHAKE_TIMEOUT_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  h2.on('session', (session) => session.on('error', () => {}));
  h2.on('stream', (stream) => {
    stream.on('error', () => {});
    stream.respond(
      { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(status.UNAUTHENTICATED), 'grpc-message': grpcMessage(details) },
      { endStream: true },
    );
    stream.session?.close();
  });
  h2.emit('connection', socket);
}

/** gRPC's percent-encoding of grpc-message: '%' and bytes outside printable ASCII. */
function grpcMessage(s: string): string {
  return Array.from(Buffer.from(s, 'utf8'), (b) => (b < 0x20 || b > 0x7e || b === 0x25 ? `%${b.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(b))).join('');
}
