/**
 * Objects that live only while a file is opened leave no object of their hidden class (V8's "map") alive once the file
 * is closed, so a full GC collects the class (transitions to it are weak) and the next open builds it again; fields
 * that widen from small integers to doubles (a file over 1 GiB) widen again each time. Measured on the benchmark's
 * 48-tensor checkpoint: every open right after a `gc()` took ~200-300 µs, mostly in V8's MapUpdater and MigrateToMap
 * (perf), against ~20 µs warm. So each such literal keeps one object of its shape alive, made before the first real
 * one with WIDE in its number fields: the fields start as doubles, no value widens them, and the class outlives GCs.
 */

/** A number no field holds as a small integer (see above). */
export const WIDE = 2 ** 53;

/** One object of each such shape, kept for good. */
const kept: object[] = [];

/**
 * Keeps `object` alive for good (one per shape, made with WIDE numbers before the first real object of its shape);
 * true, for the caller's flag.
 */
export function keepShape(object: object): true {
  kept.push(object);
  return true;
}
