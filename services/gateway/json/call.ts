// One JSON gateway request as the services see a gRPC call: the same surface as the client
// port's ServerCall (request, metadata, write/end, the 'data'/'end'/'cancelled'/'close'/'drain'
// events, emit('error', status)), so every service runs unchanged behind the gateway. What the
// service answers goes, as wire bytes, to a sink that writes JSON (gateway.ts) or, for the
// gateway's own probes (/health), back to the caller.
import { Metadata, status as Status, type MethodDefinition } from '@grpc/grpc-js';
import { CallBase, type StatusLike, type UnaryCallback } from '../../../shared/grpc/server.js';

/** Where a call's answers go. */
export interface CallSink {
  /** A unary call's response (wire bytes). */
  unary(wire: Buffer): void;
  /** One message of a streamed response; false: wait for drain(). */
  message(wire: Buffer): boolean;
  /** The end of a streamed call: OK (undefined) or an error status; or a unary call's error. */
  finish(status: StatusLike | undefined): void;
  readonly closed: boolean;
  readonly needDrain: boolean;
}

type Method = MethodDefinition<any, any>;

export class GatewayCall extends CallBase {
  request: unknown;

  constructor(
    private readonly sink: CallSink,
    private readonly method: Method,
    readonly metadata: Metadata,
    private readonly peer: string,
  ) {
    super();
  }

  getPath(): string {
    return this.method.path;
  }

  getPeer(): string {
    return this.peer;
  }

  /**
   * Always undefined: etcd's gateway does not authenticate by the client certificate's Common
   * Name (with auth on, such a request is refused before it gets here).
   */
  get peerCommonName(): string | undefined {
    return undefined;
  }

  get writable(): boolean {
    return !this.finished && !this.sink.closed;
  }

  get destroyed(): boolean {
    return this.sink.closed;
  }

  get writableNeedDrain(): boolean {
    return this.sink.needDrain;
  }

  write(message: unknown): boolean {
    if (this.finished || this.sink.closed) return false;
    return this.sink.message(this.method.responseSerialize(message) as Buffer);
  }

  /** Nothing to send ahead of the first message: an HTTP response starts with its status. */
  sendMetadata(): void {}

  end(): void {
    this.finish(undefined);
  }

  fail(err: StatusLike): void {
    this.finish({ code: typeof err.code === 'number' ? err.code : Status.UNKNOWN, details: err.details ?? err.message ?? '' });
  }

  respond: UnaryCallback<unknown> = (err, value, written) => {
    if (err) return this.fail(err);
    if (this.finished || this.sink.closed) return;
    let wire: Buffer;
    try {
      wire = this.method.responseSerialize(value) as Buffer;
    } catch (e) {
      return this.fail({ code: Status.INTERNAL, details: `kvs: cannot encode the response: ${(e as Error).message}` });
    }
    this.finished = true;
    this.clearDeadline();
    this.sink.unary(wire);
    written?.();
  };

  private finish(status: StatusLike | undefined): void {
    if (this.finished) return;
    this.finished = true;
    this.clearDeadline();
    if (!this.sink.closed) this.sink.finish(status);
  }
}
