/** "Did you mean" for mistyped command and option names (tensor names: format/suggest.ts). */
import { editDistance } from "../format/suggest.js";

export { editDistance };

/**
 * The closest candidates to a mistyped word: within a third of its length (at least 1, at most 3 edits), or those
 * it is a prefix of. Closest first; none when nothing is near, and none for one-letter options ("-x": every other
 * letter is one edit away).
 */
export function suggest(word: string, candidates: Iterable<string>): string[] {
  if (word.replace(/^-+/, "").length < 2) return [];
  const limit = Math.min(3, Math.max(1, Math.floor(word.length / 3)));
  const scored: [string, number][] = [];
  for (const candidate of candidates) {
    const distance = editDistance(word.toLowerCase(), candidate.toLowerCase(), limit);
    if (distance <= limit || (word.length >= 2 && candidate.startsWith(word))) scored.push([candidate, distance]);
  }
  scored.sort((x, y) => x[1] - y[1] || x[0].localeCompare(y[0]));
  return scored.map(([candidate]) => candidate);
}

/** ` (did you mean "x"?)`, or nothing. */
export function didYouMean(word: string, candidates: Iterable<string>, quote = (s: string) => `"${s}"`): string {
  const found = suggest(word, candidates).slice(0, 3);
  if (found.length === 0) return "";
  return ` (did you mean ${found.map(quote).join(" or ")}?)`;
}
