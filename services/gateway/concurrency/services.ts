// The v3lockpb.Lock and v3electionpb.Election gRPC services, as etcd 3.4 serves them
// (etcdserver/api/v3lock, v3election): each call opens a "session" on the request's lease
// (a lease of 60 s is granted when the request names none, and never kept alive), runs the
// recipe, and answers. Errors reach the client with code Unknown and etcd's text, because
// etcd's own services get them back from an embedded client. That client carries the caller's
// token, so each of the recipe's operations is checked for the caller as it is made: the
// Backend of a call is the caller's (`backendFor`; auth/concurrency.ts), not checked up front.
import * as grpc from '@grpc/grpc-js';
import type { ServerCall, UnaryCallback } from '../../../shared/grpc/server.js';
import { service, bigint, num } from '../../../shared/proto/index.js';
import { EtcdError } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import type { Backend } from './backend.js';
import * as recipes from './recipes.js';

type Unary = (call: ServerCall<any, unknown>, cb: UnaryCallback<unknown>) => void;

/** The Backend of one call: its operations are checked for the call's caller. */
export type CallBackend = (call: ServerCall<any, any>) => Backend;

function toStatus(err: unknown): Partial<grpc.StatusObject> {
  if (err instanceof recipes.Cancelled) return { code: grpc.status.CANCELLED, details: 'context canceled' };
  if (err instanceof recipes.RecipeError) return { code: grpc.status.UNKNOWN, details: err.message };
  // kvs's own unavailability stays retryable; etcd's errors arrive as an embedded client's.
  if (err instanceof EtcdError) return { code: err.code === grpc.status.UNAVAILABLE ? err.code : grpc.status.UNKNOWN, details: err.message };
  return { code: grpc.status.INTERNAL, details: `kvs: ${(err as Error)?.message ?? String(err)}` };
}

/**
 * An AbortSignal that fires when the client cancels the call or its deadline passes, or when
 * the gateway stops (`stopping`): a blocked Lock or Campaign, or an Observe stream, would
 * otherwise hold the stop for its whole grace period.
 */
export function callSignal(
  call: Pick<ServerCall, 'on'>,
  stopping: AbortSignal,
): { signal: AbortSignal; release: () => void } {
  const ac = new AbortController();
  const abort = () => ac.abort();
  call.on('cancelled', abort);
  stopping.addEventListener('abort', abort, { once: true });
  if (stopping.aborted) abort();
  // The listener on the gateway-wide signal must go with the call, or they pile up: a stream
  // emits 'close'; a unary call emits nothing, so its caller releases it when it answers.
  const release = () => stopping.removeEventListener('abort', abort);
  call.on('close', release);
  return { signal: ac.signal, release };
}

const SHUTTING_DOWN = { code: grpc.status.UNAVAILABLE, details: 'kvs: gateway is shutting down' };

/** concurrency.NewSession(WithLease(lease)): lease 0 means a new lease of the default TTL. */
async function sessionLease(b: Backend, lease: unknown): Promise<bigint> {
  const id = bigint(lease as number);
  return id === 0n ? b.grantLease(recipes.DEFAULT_SESSION_TTL) : id;
}

/** Runs `fn` and answers with its result, or with its error as etcd would send it. */
function unary(log: Logger, stopping: AbortSignal, method: string, fn: (call: ServerCall<any, unknown>, signal: AbortSignal) => Promise<unknown>): Unary {
  return (call, cb) => {
    const { signal, release } = callSignal(call, stopping);
    fn(call, signal).then(
      (res) => {
        release();
        cb(null, res);
      },
      (err) => {
        release();
        if (stopping.aborted) return cb(SHUTTING_DOWN);
        if (!(err instanceof recipes.Cancelled) && !(err instanceof recipes.RecipeError) && !(err instanceof EtcdError)) log.error({ err, method }, 'concurrency call failed');
        cb(toStatus(err));
      },
    );
  };
}

/** `stopping` fires when the gateway stops: blocked calls and streams then end with UNAVAILABLE. */
export function lockService(backendFor: CallBackend, log: Logger, stopping: AbortSignal) {
  const def = service('v3lockpb.Lock');
  const impl = {
    Lock: unary(log, stopping, 'Lock', async (call, signal) => {
      const b = backendFor(call);
      const lease = await sessionLease(b, call.request.lease);
      return recipes.lock(b, call.request.name, lease, signal);
    }),
    // etcd's Unlock is a plain delete of the ownership key.
    Unlock: unary(log, stopping, 'Unlock', async (call) => ({ header: await backendFor(call).deleteKey(Buffer.from(call.request.key)) })),
  };
  return { def, impl };
}

interface LeaderKeyMessage { name: Uint8Array; key: Uint8Array; rev: unknown; lease: unknown }

function leaderKey(l: LeaderKeyMessage | null | undefined): { key: Buffer; rev: number; lease: unknown } {
  if (!l) throw recipes.RecipeErrors.missingLeaderKey();
  return { key: Buffer.from(l.key), rev: num(l.rev as number), lease: l.lease };
}

export function electionService(backendFor: CallBackend, log: Logger, stopping: AbortSignal) {
  const def = service('v3electionpb.Election');
  const impl = {
    Campaign: unary(log, stopping, 'Campaign', async (call, signal) => {
      const b = backendFor(call);
      const lease = await sessionLease(b, call.request.lease);
      const r = await recipes.campaign(b, call.request.name, lease, call.request.value, signal);
      return { header: r.header, leader: { name: r.leader.name, key: r.leader.key, rev: r.leader.rev, lease: r.leader.lease.toString() } };
    }),
    Proclaim: unary(log, stopping, 'Proclaim', async (call) => {
      const l = leaderKey(call.request.leader);
      const b = backendFor(call);
      const lease = await sessionLease(b, l.lease);
      return { header: await recipes.proclaim(b, l, lease, call.request.value) };
    }),
    Resign: unary(log, stopping, 'Resign', async (call) => {
      const l = leaderKey(call.request.leader);
      const b = backendFor(call);
      await sessionLease(b, l.lease);
      return { header: await recipes.resign(b, l) };
    }),
    Leader: unary(log, stopping, 'Leader', async (call) => recipes.leader(backendFor(call), call.request.name)),
    Observe(call: ServerCall<{ name: Uint8Array }, unknown>) {
      const { signal } = callSignal(call, stopping);
      signal.addEventListener('abort', () => stopping.aborted && call.emit('error', SHUTTING_DOWN), { once: true });
      const send = (header: unknown, kv: unknown) =>
        new Promise<void>((resolve) => {
          if (call.write({ header, kv })) resolve();
          else call.once('drain', () => resolve());
        });
      // As etcd's Observe: when its watch fails (e.g. its revision was compacted) the stream
      // just ends, with status OK; the client observes again. So does a refused read (etcd's
      // observe gives up on any error of its client).
      recipes.observe(backendFor(call), call.request.name, signal, send).catch((err) => {
        if (signal.aborted) return;
        log.warn({ err }, 'election observe ended');
        call.end();
      });
    },
  };
  return { def, impl };
}
