// etcdserverpb.Lease. Grant and revoke are writes (the storage Write stream, through the WAL);
// keep-alives, time-to-live and the lease list go to storage's Lease stream, answered from its
// live deadlines without a WAL write. Requests travel as the client's bytes, and storage's
// encoded answers come back as they are.
import * as grpc from '@grpc/grpc-js';
import type { ServerCall, UnaryCallback } from '../../shared/grpc/server.js';
import { service } from '../../shared/proto/index.js';
import type { WriteLink } from '../../shared/batch-link/link.js';
import type { OpenStreams } from '../../shared/grpc/plumbing.js';
import { forward } from './kv.js';
import { toServiceError } from './service-error.js';
import { Op } from '../../shared/storage/ops.js';
import type { AuthGate } from './auth/gate.js';
import { guardedForward, writeChecks } from './auth/guard.js';
import { checked, keepAliveCheck, leaseLeasesCheck, leaseTimeToLiveCheck } from './auth/wrap.js';

const RAW = ['LeaseGrant', 'LeaseRevoke', 'LeaseKeepAlive', 'LeaseTimeToLive', 'LeaseLeases'];

/**
 * `writes` is the link on storage's Write stream, `leases` the one on its Lease stream; the
 * keep-alive streams are registered in `open`, which the gateway ends when it stops.
 */
export function leaseService(writes: WriteLink, leases: WriteLink, open: OpenStreams, gate: AuthGate) {
  const def = service('etcdserverpb.Lease', { rawRequests: RAW });
  // With auth enabled, every Lease call needs a user (etcd's later releases; 3.4.23 answered
  // some without a token), and the keys attached to a lease decide the rest.
  const impl = {
    LeaseGrant: guardedForward(writes, Op.LEASE_GRANT, gate, writeChecks.user),
    LeaseRevoke: guardedForward(writes, Op.LEASE_REVOKE, gate, writeChecks.leaseRevoke),
    LeaseTimeToLive: checked(gate, leaseTimeToLiveCheck, forward(leases, Op.LEASE_TIME_TO_LIVE) as never),
    LeaseLeases: checked(gate, leaseLeasesCheck(gate), forward(leases, Op.LEASE_LEASES) as never),
    LeaseKeepAlive: keepAlive(leases, open, gate),
  };
  return { def, impl };
}

/**
 * One client stream of keep-alives: every request is sent on at once, and the answers go back
 * in request order (as etcd answers them one by one). A failure ends the stream with its
 * status, as etcd does; clients open a new one.
 */
function keepAlive(leases: WriteLink, open: OpenStreams, gate: AuthGate) {
  return (call: ServerCall<Buffer, Buffer>) => {
    open.add(call);
    let last: Promise<unknown> = Promise.resolve();
    let failed = false;
    call.on('data', (body: Buffer) => {
      let answer: Promise<Buffer>;
      try {
        keepAliveCheck(gate, call, body);
        answer = leases.call(Op.LEASE_KEEPALIVE, body);
      } catch (err) {
        answer = Promise.reject(err);
      }
      answer.catch(() => {}); // handled in order below
      last = last.then(async () => {
        if (failed) return;
        try {
          const res = await answer;
          if (!call.destroyed && call.writable) call.write(res);
        } catch (err) {
          failed = true;
          call.emit('error', toServiceError(err));
        }
      });
    });
    call.on('end', () => {
      void last.then(() => {
        if (!failed) call.end();
      });
    });
    call.on('error', () => {
      failed = true;
    });
  };
}
