/**
 * The pickle reader's limits and their defaults, alone in a module: the package's Node bundle loads the rest of
 * src/pickle on first use (scripts/esbuild-lazy.mjs), and a public constant must be there from the start. Pure.
 */

/** Bounds on what reading one pickle may cost; past any of them the pickle is refused with `PickleLimit`. */
export interface PickleLimits {
  /** Largest pickle read into memory, in bytes. Default 512 MiB (a 10k-tensor state dict pickles to ~2 MB). */
  maxPickleBytes?: number;
  /** Most memo entries (PUT / MEMOIZE). Default 1,000,000. */
  maxMemo?: number;
  /** Deepest value stack. Default 1,000,000. */
  maxStack?: number;
  /** Deepest MARK nesting. Default 10,000. */
  maxMarks?: number;
  /** Most values created in one pickle. Default 10,000,000. */
  maxObjects?: number;
  /** Longest int (LONG1 / LONG4 / text LONG) in bytes. Default 1,024. */
  maxIntBytes?: number;
}

/** The defaults of `PickleLimits`. */
export const DEFAULT_PICKLE_LIMITS: Required<PickleLimits> = {
  maxPickleBytes: 512 * 1024 * 1024,
  maxMemo: 1_000_000,
  maxStack: 1_000_000,
  maxMarks: 10_000,
  maxObjects: 10_000_000,
  maxIntBytes: 1024,
};
