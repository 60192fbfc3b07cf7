/** Number formatting for the page: grouped integers and byte units as `inspect` prints them, compact floats. */

export { group, humanBytes } from "../src/view/inspect-format.js";

/** Parameter counts as people say them: 1.2B, 350M, 12.5K. */
export function humanCount(n: number): string {
  const steps: [number, string][] = [
    [1e12, "T"],
    [1e9, "B"],
    [1e6, "M"],
    [1e3, "K"],
  ];
  for (const [size, suffix] of steps) {
    if (n >= size) return `${(n / size).toFixed(n / size < 10 ? 2 : 1)}${suffix}`;
  }
  return String(n);
}

/** A float with 6 significant digits (what a reader compares by eye), exact for integers. */
export function float(x: number | null): string {
  if (x === null) return "—";
  if (Number.isInteger(x) && Math.abs(x) < 1e15) return String(x);
  return Number(x.toPrecision(6)).toString();
}

export const shapeText = (shape: readonly number[]): string => `[${shape.join(", ")}]`;
