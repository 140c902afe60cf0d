import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { createLogger } from '../log.js';
import { Errors } from '../errors.js';
import { BatchLink, type BatchCalls } from './link.js';

const log = createLogger('test', 'silent');

/** A link's far end: the calls it opened, what was written on each, and a way to answer. */
class FakePeer implements BatchCalls {
  readonly calls: (EventEmitter & { written: { requests: { id: number; body: Uint8Array }[] }[] })[] = [];
  open() {
    const call = Object.assign(new EventEmitter(), {
      written: [] as { requests: { id: number; body: Uint8Array }[] }[],
      write(m: { requests: { id: number; body: Uint8Array }[] }) {
        call.written.push(m);
        return true;
      },
      end() {},
    });
    this.calls.push(call);
    return call;
  }
  close() {}
  /** Accepts the latest call (the server's metadata) and answers every write on it with its body. */
  accept(): void {
    const call = this.calls.at(-1)!;
    call.emit('metadata');
  }
  answerAll(): void {
    const call = this.calls.at(-1)!;
    for (const m of call.written.splice(0)) call.emit('data', { results: m.requests.map((r) => ({ id: r.id, body: Buffer.from(r.body), code: 0, message: '' })) });
  }
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

test('handOver: writes a link never sent go to the next link and are answered there; writes in flight fail (outcome unknown)', async () => {
  // The old leader's link: one write sent on its stream, then the stream broke (the write
  // fails: it may have been applied), and a second write is queued while it reconnects.
  const oldPeer = new FakePeer();
  const old = new BatchLink(oldPeer, log, { unavailable: Errors.noLeader, waitMs: 60_000 });
  oldPeer.accept();
  const inFlight = old.call(1, Buffer.from('sent'));
  await tick();
  assert.equal(oldPeer.calls[0]!.written.length, 1);
  const failed = assert.rejects(inFlight, { message: Errors.noLeader.message });
  oldPeer.calls[0]!.emit('end');
  await failed;
  const unsent = old.call(1, Buffer.from('unsent'));
  await tick();

  const nextPeer = new FakePeer();
  const next = new BatchLink(nextPeer, log, { unavailable: Errors.noLeader });
  old.handOver(next);
  nextPeer.accept();
  await tick();
  assert.deepEqual(nextPeer.calls[0]!.written.flatMap((m) => m.requests.map((r) => Buffer.from(r.body).toString())), ['unsent']);
  nextPeer.answerAll();
  assert.equal((await unsent).toString(), 'unsent');
  // Nothing more went to the old peer: its reconnection stopped, nothing was sent twice.
  assert.ok(oldPeer.calls.every((c, i) => i === 0 || c.written.length === 0));
  next.close();
});

test('handOver to a closed link fails the unsent writes at once', async () => {
  const a = new BatchLink(new FakePeer(), log, { unavailable: Errors.noLeader, waitMs: 60_000 });
  const queued = a.call(1, Buffer.from('x'));
  const b = new BatchLink(new FakePeer(), log, { unavailable: Errors.noLeader });
  b.close();
  a.handOver(b);
  await assert.rejects(queued, { message: Errors.noLeader.message });
});
