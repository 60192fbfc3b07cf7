/**
 * SHA-256 of each of several byte ranges of one stream, fed its chunks in order: the building block of every digest
 * `hash` prints (the whole file is one range, the data region another, each tensor one of a list). Node-only.
 */
import type { Hash } from "node:crypto";

export interface SegmentDigests {
  /** A chunk of the stream covering [start, start + chunk.length); chunks arrive in order. */
  update(chunk: Uint8Array, start: number): void;
  /** The digests (hex) of every range, in order, once the stream has reached `end`. */
  finish(end: number): string[];
}

/**
 * Digests of `bounds` (flat [start0, end0, start1, end1, ...]: sorted, disjoint ranges; empty ones allowed).
 * Self-contained on purpose: worker threads run its source text (`digest-lanes.ts`), so it uses nothing but its
 * arguments.
 */
export function segmentDigests(newHash: () => Hash, bounds: ArrayLike<number>): SegmentDigests {
  const digests: string[] = [];
  let k = 0;
  let hash = newHash();
  const closeUpTo = (at: number) => {
    while (k < bounds.length && bounds[k + 1]! <= at) {
      digests.push(hash.digest("hex"));
      hash = newHash();
      k += 2;
    }
  };
  return {
    update(chunk, start) {
      const end = start + chunk.length;
      closeUpTo(start);
      while (k < bounds.length && bounds[k]! < end) {
        const from = Math.max(bounds[k]!, start);
        const to = Math.min(bounds[k + 1]!, end);
        if (to > from) hash.update(to - from === chunk.length ? chunk : chunk.subarray(from - start, to - start));
        if (bounds[k + 1]! > end) break;
        digests.push(hash.digest("hex"));
        hash = newHash();
        k += 2;
      }
    },
    finish(end) {
      closeUpTo(end);
      return digests;
    },
  };
}
