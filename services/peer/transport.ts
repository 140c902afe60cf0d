// The peer port's gRPC plumbing: the Peer service's client constructor and the credentials of
// both directions (plaintext, or mutual TLS with --peer-tls-*; see docs/cluster.md).
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { service } from '../../shared/proto/index.js';

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

export interface PeerCredentials {
  server: grpc.ServerCredentials;
  client: grpc.ChannelCredentials;
  tls: boolean;
}

export function peerCredentials(cfg: Pick<Config, 'peerTlsCa' | 'peerTlsCert' | 'peerTlsKey'>): PeerCredentials {
  if (!cfg.peerTlsCa) return { server: grpc.ServerCredentials.createInsecure(), client: grpc.credentials.createInsecure(), tls: false };
  const ca = fs.readFileSync(cfg.peerTlsCa);
  const cert = fs.readFileSync(cfg.peerTlsCert!);
  const key = fs.readFileSync(cfg.peerTlsKey!);
  return {
    server: grpc.ServerCredentials.createSsl(ca, [{ private_key: key, cert_chain: cert }], true),
    client: grpc.credentials.createSsl(ca, key, cert),
    tls: true,
  };
}

export function peerClient(addr: string, creds: PeerCredentials): grpc.Client & Record<string, any> {
  return new PeerClient(addr, creds.client, PEER_CHANNEL_OPTIONS) as any;
}
