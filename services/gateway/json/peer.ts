// What a gateway exchange knows of its client's connection.
import type net from 'node:net';
import type tls from 'node:tls';

/** The verified client certificate's Common Name (mutual TLS), else undefined. */
export function commonNameOf(socket: net.Socket): string | undefined {
  const s = socket as tls.TLSSocket;
  if (!s.encrypted || !s.authorized) return undefined;
  const cn = s.getPeerCertificate()?.subject?.CN as string | string[] | undefined;
  return (Array.isArray(cn) ? cn[cn.length - 1] : cn) || undefined;
}

/** host:port of the other end. */
export const peerOf = (s: net.Socket) => (s.remoteAddress ? `${s.remoteAddress}:${s.remotePort}` : 'unknown');
