// What a call presents to authenticate: its token, or the Common Name of its verified client
// certificate. Read by the gate (simple tokens) and by the JWT verifier alike.

/** The part of a server call the gate reads. */
export interface CallLike {
  metadata: { get(key: string): unknown[] };
}

/**
 * Mutual TLS (--client-tls-ca): etcd authorises a request that carries no token as the user
 * named by the client certificate's Common Name (AuthInfoFromTLS). The transport
 * (shared/grpc/server.ts) puts the verified peer certificate's CN on the server call as
 * `peerCommonName`; undefined without a verified client certificate.
 * integration/auth-tls.test.ts checks it against etcd.
 */
export function peerCommonName(call: CallLike): string | undefined {
  const cn = (call as { peerCommonName?: string | (() => string | undefined) }).peerCommonName;
  return typeof cn === 'function' ? cn.call(call) : cn;
}

/** The token a call carries (etcd: the `token` metadata, else `authorization`). */
export function presentedToken(call: CallLike): string | undefined {
  return firstString(call.metadata.get('token')) ?? firstString(call.metadata.get('authorization'));
}

function firstString(v: unknown[] | undefined): string | undefined {
  const x = v?.[0];
  if (x === undefined) return undefined;
  return typeof x === 'string' ? x : Buffer.from(x as Uint8Array).toString();
}
