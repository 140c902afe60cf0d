// The JSON gateway's view of one HTTP request and its response (gateway.ts), whichever HTTP it
// came over: HTTP/1.1, HTTP/2 that is not gRPC (exchanges.ts), or a WebSocket (websocket.ts).
/** What the gateway needs of an HTTP request and its response, whichever HTTP it came over. */
export interface HttpExchange {
  readonly method: string;
  /** The request target, query included. */
  readonly url: string;
  header(name: string): string | undefined;
  readonly peer: string;
  /** The verified client certificate's Common Name (mutual TLS), else undefined. */
  readonly commonName: string | undefined;
  /** The connection is TLS. */
  readonly secure: boolean;
  /**
   * The body comes in whole messages and ends only with the connection (WebSocket): a unary
   * call's request is its first complete JSON value.
   */
  readonly framed?: boolean;
  onData(fn: (chunk: Buffer) => void): void;
  onEnd(fn: () => void): void;
  /** The client went away, or the response ended. */
  onClose(fn: () => void): void;
  onDrain(fn: () => void): void;
  /** The body could not be read to its end (a bad chunk): `message` is Go's word for why. */
  onBodyError(fn: (message: string) => void): void;
  /** Stops reading the body (the rest is not wanted); the response can still be written. */
  discardBody(): void;
  respond(status: number, headers: Record<string, string>): void;
  write(chunk: string): boolean;
  end(chunk?: string, trailers?: Record<string, string>): void;
  readonly closed: boolean;
  readonly needDrain: boolean;
}
