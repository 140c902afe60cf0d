// Samples the node's own merged metrics for the console's charts and timeline, so that no
// Prometheus is needed. Nothing until a console first asks for data (a node nobody looks at
// does no more than before); then every 2 s while a console has asked in the last 5 minutes,
// every 15 s otherwise, which keeps the timeline (counters do not lose an election between two
// samples) at the cost of one scrape of each component's registry per 15 s.
import type { MetricsJson } from '../../shared/metrics.js';
import { changes, flatten, type Sample, type TimelineEvent } from './series.js';

const ACTIVE_MS = 2000;
const IDLE_MS = 15_000;
const ACTIVE_FOR_MS = 5 * 60_000;
/** Ten minutes at the active rate. */
const KEEP = 300;
const KEEP_EVENTS = 500;

export class MetricsSampler {
  readonly samples: Sample[] = [];
  readonly events: TimelineEvent[] = [];
  private lastUse = 0;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly scrape: () => Promise<MetricsJson>) {}

  private started = false;

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }

  /** A console asked for data: sample at the fast rate, now if the last sample is old. */
  touch(): Promise<void> {
    if (!this.started && !this.stopped) {
      this.started = true;
      this.schedule(ACTIVE_MS);
    }
    const wasIdle = Date.now() - this.lastUse > ACTIVE_FOR_MS;
    this.lastUse = Date.now();
    const last = this.samples.at(-1);
    if (wasIdle || !last || Date.now() - last.t > ACTIVE_MS * 2) return this.sampleNow();
    return Promise.resolve();
  }

  sampleNow(): Promise<void> {
    this.inFlight ??= this.scrape()
      .then((json) => this.add({ t: Date.now(), m: flatten(json) }))
      .catch(() => undefined)
      .finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  latest(): Sample | undefined {
    return this.samples.at(-1);
  }

  private add(s: Sample): void {
    const prev = this.samples.at(-1);
    if (prev) this.events.push(...changes(prev, s));
    else this.events.push(...changes({ t: s.t, m: {} }, s));
    this.samples.push(s);
    if (this.samples.length > KEEP) this.samples.splice(0, this.samples.length - KEEP);
    if (this.events.length > KEEP_EVENTS) this.events.splice(0, this.events.length - KEEP_EVENTS);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.sampleNow().finally(() => this.schedule(Date.now() - this.lastUse < ACTIVE_FOR_MS ? ACTIVE_MS : IDLE_MS));
    }, ms);
    this.timer.unref();
  }
}
