// The peer port's gRPC plumbing: the Peer service's client constructor, the credentials of
// both directions, and the peer port's listener. Plaintext, or with --peer-tls-ca/-cert/-key
// mutual TLS, TLS 1.3 only, both directions (docs/security.md, "Peer TLS").
//
// grpc-js's own TLS (createSsl on either side) offers no TLS version setting and no way to
// see a failed handshake, so kvs does the TLS itself on both sides and hands grpc-js the
// result:
//  - the leader's side: the peer port is a net.Server of ours. Each connection's first byte
//    says whether the peer speaks TLS (a handshake record starts with 0x16); a connection that
//    matches this node's setup goes to a node TLS server (TLS 1.3 only, client certificate
//    requested and checked by us) and, once authenticated, into the grpc-js server through its
//    connection injector. A peer this node refuses (no TLS on a TLS port, TLS on a plaintext
//    port, a certificate that does not verify) is logged once per condition, and where it can
//    still be answered it is: a gRPC UNAUTHENTICATED status saying why, so the dialing node
//    can log it too (it never reaches a Peer service).
//  - the follower's side: a ChannelCredentials whose connector makes each connection with the
//    secure context of the files as they are now (TLS 1.3 only, this node's certificate), and
//    names a failed handshake in one line per condition.
// Certificate files are re-read when they change, before each handshake on either side.
import net from 'node:net';
import tls from 'node:tls';
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { splitHostPort } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { service } from '../../shared/proto/index.js';
import { PeerTlsSource, peerTlsFiles } from '../../shared/grpc/peer-tls.js';
import { guardEarlyResetStreams } from './grpc-server-guards.js';

export const PeerClient = grpc.makeGenericClientConstructor(service('kvs.peer.Peer'), 'Peer');
export const AgentClient = grpc.makeGenericClientConstructor(service('kvs.peer.Agent'), 'Agent');

/** Peer channels: batches and WAL chunks are large; a dead leader is noticed by heartbeats. */
export const PEER_CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1000,
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
};

/**
 * The Peer server's options. Its keepalive is what closes a broken connection: after some
 * protocol errors (DATA on a closed stream, a CONTINUATION out of place, a length that lies)
 * node's http2 sends GOAWAY with the error code and then stops reading the socket without
 * closing it or telling JS (no 'error', no 'close'), and a connection that never finishes its
 * preface is not closed either. Such a session cannot answer a PING: grpc-js pings every
 * session every 2 s and destroys one whose ACK has not come 3 s later (found by the port
 * fuzzer, docs/reliability.md). Real peers answer PINGs from their http2 layer, busy or not;
 * the timeout matches the leader's own ACK timeout (leader.ts), so a follower stalled long
 * enough to lose its session was already being dropped for its missing ACKs. (grpc-js's server
 * has no ping policy to relax: 'grpc.keepalive_permit_without_calls' is a channel option.)
 */
export const PEER_SERVER_OPTIONS: grpc.ServerOptions = {
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
  'grpc.keepalive_time_ms': 2_000,
  'grpc.keepalive_timeout_ms': 3_000,
};

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
  client: grpc.ChannelCredentials;
  tls: boolean;
  /** This node's peer TLS files (with TLS). */
  source?: PeerTlsSource;
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

export function peerCredentials(cfg: Pick<Config, 'peerTlsCa' | 'peerTlsCert' | 'peerTlsKey'>, log: Logger): PeerCredentials {
  const files = peerTlsFiles(cfg);
  const conditions = new ConditionLog(log);
  const source = files ? new PeerTlsSource(files, log) : undefined;
  return {
    client: source ? new PeerChannelCredentials(source, conditions) : grpc.credentials.createInsecure(),
    tls: source !== undefined,
    source,
    conditions,
    callFailed(err, leader) {
      if (err.code !== grpc.status.UNAUTHENTICATED || !err.details?.startsWith(REFUSED)) return;
      conditions.report('error', `dial ${leader.peerUrl} ${err.details}`, { leader: leader.nodeId, at: leader.peerUrl }, `cannot join the cluster: the leader refused this node: ${err.details.slice('kvs: '.length)}`);
    },
    served(leader) {
      conditions.clear(`dial ${leader.peerUrl} `);
    },
  };
}

/** Metadata of every peer call: the epoch of the leadership the caller found in the lock. */
export const EPOCH_HEADER = 'kvs-leader-epoch';

/** A client of the leader at `addr`, which the caller found in the lock with `epoch`. */
export function peerClient(addr: string, creds: PeerCredentials, epoch: string): grpc.Client & Record<string, any> {
  const withEpoch: grpc.Interceptor = (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set(EPOCH_HEADER, epoch);
        next(metadata, listener);
      },
    });
  return new PeerClient(addr, creds.client, { ...PEER_CHANNEL_OPTIONS, interceptors: [withEpoch] }) as any;
}

/** Whether a peer call was meant for the leadership of `epoch` (lock.ts). */
export function callForEpoch(call: { metadata: grpc.Metadata }, epoch: string): boolean {
  return (call.metadata.get(EPOCH_HEADER)[0] ?? '') === epoch;
}

// ---- the dialing side ----------------------------------------------------------------------

type ConnectorArgs = Parameters<grpc.ChannelCredentials['_createSecureConnector']>;

/**
 * Mutual TLS 1.3 to the leader with the files as they are at each connection. The leader's
 * certificate must be signed by --peer-tls-ca and name the host dialed (its --advertise-peer),
 * as any TLS server's.
 */
class PeerChannelCredentials extends grpc.ChannelCredentials {
  constructor(
    private readonly source: PeerTlsSource,
    private readonly conditions: ConditionLog,
  ) {
    super();
  }

  _isSecure(): boolean {
    return true;
  }

  _equals(other: grpc.ChannelCredentials): boolean {
    return other === this;
  }

  _createSecureConnector(target: ConnectorArgs[0], _options: ConnectorArgs[1], callCredentials?: ConnectorArgs[2]) {
    const addr = target.path;
    const host = splitHostPort(addr)?.[0] ?? addr;
    return {
      connect: (socket: net.Socket) =>
        new Promise<{ socket: net.Socket; secure: boolean }>((resolve, reject) => {
          const { context } = this.source.current();
          let done = false;
          const s = tls.connect({
            socket,
            secureContext: context,
            ALPNProtocols: ['h2'],
            host,
            // No SNI for an IP address (RFC 6066; node warns); the identity check uses `host`.
            ...(net.isIP(host) ? {} : { servername: host }),
          });
          s.once('secureConnect', () => {
            done = true;
            resolve({ socket: s, secure: true });
          });
          s.on('error', (err: Error & { code?: string; reason?: string }) => {
            if (done) return; // grpc-js's own listeners handle the connection from here
            done = true;
            const why = handshakeFailure(err);
            this.conditions.report('error', `dial ${addr} ${why}`, { at: addr, code: err.code, err: err.reason ?? err.message }, `cannot connect to the leader at ${addr}: ${why}`);
            reject(err);
          });
        }),
      waitForReady: () => Promise.resolve(),
      getCallCredentials: () => callCredentials ?? grpc.CallCredentials.createEmpty(),
      destroy: () => {},
    };
  }
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
export async function listenPeer(server: grpc.Server, addr: string, creds: PeerCredentials, nodeId: string, log: Logger): Promise<PeerListener> {
  const hp = splitHostPort(addr);
  if (!hp) throw new Error(`--peer-listen ${addr}: expected host:port`);
  guardEarlyResetStreams(server);
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
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
      injector.injectConnection(socket);
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
      injector.injectConnection(socket);
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
      { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(grpc.status.UNAUTHENTICATED), 'grpc-message': grpcMessage(details) },
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
