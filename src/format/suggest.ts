/**
 * "Did you mean": the names closest to a mistyped one. Tensor names (`TensorNotFound` carries them) and, through
 * cli/suggest.ts, command and option names.
 */
import { quoteName, SafetensorError } from "./errors.js";

/**
 * Levenshtein distance (insert, delete, substitute; an adjacent swap counts 1, as people make it). With `limit`,
 * any distance over it is returned as `limit + 1`: only the diagonal band of width 2 * limit + 1 is computed, pairs
 * whose lengths differ by more are not compared, and a row entirely over the limit ends the work (a row's minimum
 * never decreases). A lookup among a header's 100k names then costs milliseconds, not seconds.
 */
export function editDistance(a: string, b: string, limit = Number.POSITIVE_INFINITY): number {
  const cap = limit + 1;
  if (Math.abs(a.length - b.length) > limit) return cap;
  const n = b.length;
  let before: number[] = new Array(n + 1).fill(cap);
  let previous: number[] = Array.from({ length: n + 1 }, (_, j) => Math.min(j, cap));
  let row: number[] = new Array(n + 1).fill(cap);
  for (let i = 1; i <= a.length; i++) {
    row.fill(cap);
    row[0] = Math.min(i, cap);
    let best = row[0]!;
    const to = Math.min(n, i + limit);
    for (let j = Math.max(1, i - limit); j <= to; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let value = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) value = Math.min(value, before[j - 2]! + 1);
      row[j] = Math.min(value, cap);
      if (row[j]! < best) best = row[j]!;
    }
    if (best >= cap) return cap;
    [before, previous, row] = [previous, row, before];
  }
  return previous[n]!;
}

/** How many closest names a `TensorNotFound` carries. */
export const TENSOR_SUGGESTIONS = 3;

/**
 * The tensor names closest to `name` (at most `max`, all equally close): those within a third of its length in edits
 * (1 to 3; letter case ignored), else those that differ by leading dotted components ("wte.weight" for
 * "transformer.wte.weight", and the other way around: a prefix such as "model." added or left out).
 */
export function closestNames(name: string, names: Iterable<string>, max = TENSOR_SUGGESTIONS): string[] {
  if (name.length === 0) return [];
  const limit = Math.min(3, Math.max(1, Math.floor(name.length / 3)));
  const lower = name.toLowerCase();
  const scored: [string, number][] = [];
  for (const candidate of names) {
    const distance = editDistance(lower, candidate.toLowerCase(), limit);
    if (distance <= limit) scored.push([candidate, distance]);
    else if (candidate.endsWith(`.${name}`) || name.endsWith(`.${candidate}`)) {
      scored.push([candidate, limit + Math.abs(candidate.length - name.length)]);
    }
  }
  scored.sort((x, y) => x[1] - y[1] || (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
  // Only the nearest: one edit away from a name, the names two edits away are noise.
  return scored
    .filter(([, distance]) => distance === scored[0]![1])
    .slice(0, max)
    .map(([candidate]) => candidate);
}

/** ` (did you mean "x" or "y"?)`, or nothing. */
export function didYouMean(found: readonly string[], quote: (s: string) => string = quoteName): string {
  return found.length === 0 ? "" : ` (did you mean ${found.map(quote).join(" or ")}?)`;
}

/**
 * `TensorNotFound` for `name`: the closest of `names` in its message and, as data, in `suggestions`. `where` says
 * where it was looked for (a file's path), when the message should.
 */
export function tensorNotFound(name: string, names: Iterable<string>, where?: string): SafetensorError {
  const suggestions = closestNames(name, names);
  const place = where === undefined ? "" : ` in ${where}`;
  return new SafetensorError("TensorNotFound", `no tensor named ${quoteName(name)}${place}${didYouMean(suggestions)}`, {
    tensor: name,
    suggestions,
  });
}
