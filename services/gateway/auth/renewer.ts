// Keeps tokens in use alive. etcd's simple tokens expire --token-ttl after their LAST use; kvs
// stores each token's expiry (so it survives restarts), and a token used in the second half
// of its lifetime has its expiry moved to now + TTL by one batched write (at most one per
// second), so a token in steady use never expires while an idle one does within TTL.
import { encode } from '../../../shared/proto/index.js';
import type { Logger } from '../../../shared/log.js';
import type { WriteLink } from '../../../shared/grpc/batch-link.js';
import { Op } from '../../storage/engine.js';

export class TokenRenewer {
  private pending = new Map<string, Buffer>();
  /** Sent and not yet answered: not sent again meanwhile. */
  private inFlight = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly link: WriteLink, private readonly log: Logger, private readonly intervalMs = 1000) {}

  renew = (digest: Buffer): void => {
    const k = digest.toString('hex');
    if (this.inFlight.has(k) || this.pending.has(k)) return;
    this.pending.set(k, digest);
    this.timer ??= setTimeout(this.flush, this.intervalMs).unref();
  };

  private flush = (): void => {
    this.timer = undefined;
    const batch = this.pending;
    this.pending = new Map();
    for (const k of batch.keys()) this.inFlight.add(k);
    const done = () => {
      for (const k of batch.keys()) this.inFlight.delete(k);
    };
    this.link.call(Op.AUTH_TOKEN_REFRESH, encode('kvs.storage.AuthTokenRefresh', { digests: [...batch.values()] })).then(done, (err) => {
      done();
      this.log.debug({ err: (err as Error).message, tokens: batch.size }, 'token renewal failed; retried on their next use');
    });
  };

  close(): void {
    if (this.timer) clearTimeout(this.timer);
  }
}
