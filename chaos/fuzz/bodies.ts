// Request bodies for any gRPC method of the loaded .proto files: random well-formed requests,
// about half of them mutated on the wire, every one passed by the scratch guard.
import protobuf from 'protobufjs';
import { root } from '../../shared/proto/index.js';
import { encodeMessage, mutate, randomMessage, type Pools } from './protobuf-fuzz.js';
import type { Rand } from './random.js';
import { staysInScratch } from './scratch-guard.js';

export interface MethodInfo {
  path: string;
  requestType: protobuf.Type;
  requestStream: boolean;
  responseStream: boolean;
}

/** The methods of `services` (fully qualified names), by path. */
export function methodsOf(services: readonly string[]): MethodInfo[] {
  return services.flatMap((name) =>
    root.lookupService(name).methodsArray.map((m) => {
      m.resolve();
      return { path: `/${name}/${m.name}`, requestType: m.resolvedRequestType!, requestStream: !!m.requestStream, responseStream: !!m.responseStream };
    }),
  );
}

/** A body no decoder accepts (a stray end-group tag): always safe to send anywhere. */
export const UNDECODABLE = Buffer.from([0x0c]);

/**
 * A body for `method`: well-formed (`fill` may adjust the object first), or mutated with
 * probability `mutateP`; redrawn until the scratch guard passes it.
 */
export function requestBody(rand: Rand, method: MethodInfo, pools: Pools, mutateP = 0.5, fill?: (o: Record<string, unknown>) => void): Buffer {
  for (let tries = 0; tries < 20; tries++) {
    const obj = randomMessage(rand, method.requestType, pools);
    fill?.(obj);
    let body = encodeMessage(method.requestType, obj);
    if (rand.chance(mutateP)) body = mutate(rand, body).body;
    if (staysInScratch(method.path, body)) return body;
  }
  return UNDECODABLE;
}
