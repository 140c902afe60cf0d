// The chaos harness's checkers, in one import:
//   checkLinearizability(history, options) → report; formatReport(report) → text
//     ("linearizable: yes|no|unknown" and a timeline of each counterexample); renderHtml(report)
//   checkAppendSet(attempts, finalReads) → report; formatAppendSetReport(report) → text
//   simulateRegister(options) → a random linearizable history (for self-tests)
// See linearizability.ts, append-set.ts and docs/reliability.md.

export type { KvInput, KvOutput, KvOperation, Op } from './history.js';
export { describeOp } from './history.js';
export type { Verdict } from './wgl.js';
export {
  checkLinearizability,
  checkKey,
  explainKey,
  type CheckOptions,
  type Counterexample,
  type KeyReport,
  type LinearizabilityReport,
} from './linearizability.js';
export { formatReport, formatCounterexample, textTimeline, counterexampleSvg, renderHtml } from './render.js';
export {
  checkAppendSet,
  formatAppendSetReport,
  type AppendAttempt,
  type AppendOutcome,
  type AppendSetReport,
  type AppendSetKeyReport,
} from './append-set.js';
export { simulateRegister, type SimOptions } from './simulate.js';
