// Keeps tokens in use alive. etcd's simple tokens expire --token-ttl after their LAST use; kvs
// stores each token's expiry (so it survives restarts), and a token used in the second half
// of its lifetime has its expiry moved to now + TTL by one batched write (normally at most one
// per second), so a token in steady use never expires while an idle one does within TTL.
// The write must land before the token expires (storage does not renew an expired token): a
// token whose remaining life is short makes the batch go out sooner, by half its remaining
// life. That adds at most one write per token (it is then renewed, or expired), so it cannot
// multiply writes beyond the logins that made the tokens. Without it a token used in the last
// second of its life expired anyway, and with --token-ttl 2 every token did, however steadily
// used (integration/auth-token-ttl.test.ts).
import { encode } from '../../../shared/proto/index.js';
import type { Logger } from '../../../shared/log.js';
import type { WriteLink } from '../../../shared/batch-link/link.js';
import { Op } from '../../../shared/storage/ops.js';

export class TokenRenewer {
  private pending = new Map<string, Buffer>();
  /** Sent and not yet answered: not sent again meanwhile. */
  private inFlight = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (ms since the epoch). */
  private timerAt = 0;

  constructor(private readonly link: WriteLink, private readonly log: Logger, private readonly intervalMs = 1000, private readonly now: () => number = Date.now) {}

  /** `expiresAtMs`: the token's current expiry; the batch is sent by half its remaining life. */
  renew = (digest: Buffer, expiresAtMs?: number): void => {
    const k = digest.toString('hex');
    if (this.inFlight.has(k)) return;
    const now = this.now();
    const at = now + Math.min(this.intervalMs, expiresAtMs === undefined ? Infinity : Math.max(0, (expiresAtMs - now) / 2));
    if (!this.pending.has(k)) this.pending.set(k, digest);
    if (this.timer && this.timerAt <= at) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(this.flush, at - now).unref();
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
