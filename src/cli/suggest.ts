/** "Did you mean" for mistyped command and option names. */

/** Levenshtein distance (insert, delete, substitute; an adjacent swap counts 1, as people make it). */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[] = new Array(rows * cols).fill(0);
  for (let i = 0; i < rows; i++) d[i * cols] = i;
  for (let j = 0; j < cols; j++) d[j] = j;
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[(i - 1) * cols + j]! + 1, d[i * cols + j - 1]! + 1, d[(i - 1) * cols + j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, d[(i - 2) * cols + j - 2]! + 1);
      }
      d[i * cols + j] = best;
    }
  }
  return d[rows * cols - 1]!;
}

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
    const distance = editDistance(word.toLowerCase(), candidate.toLowerCase());
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
