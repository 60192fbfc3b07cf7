/** Number formats and tables (plain text for the terminal, markdown for RESULTS.md). */

export function fmtMs(v: number | undefined | null): string {
  if (v === undefined || v === null || !Number.isFinite(v)) return "—";
  if (v < 0.1) return v.toFixed(4);
  if (v < 10) return v.toFixed(3);
  if (v < 1000) return v.toFixed(1);
  return v.toFixed(0);
}

export function fmtMib(v: number | undefined | null): string {
  if (v === undefined || v === null || !Number.isFinite(v)) return "—";
  return v.toFixed(1);
}

export function fmtRatio(r: number | null): string {
  if (r === null) return "—";
  return `${r >= 10 ? r.toFixed(1) : r.toFixed(2)}×`;
}

/** "we win N×" / bold "we lose N×" (N = the slower side over the faster one). */
export function verdict(r: number | null): string {
  if (r === null) return "—";
  if (r >= 1) return `we win ${fmtRatio(r)}`;
  return `**we lose ${fmtRatio(1 / r)}**`;
}

export function textTable(rows: string[][], leftColumns = 2): string {
  const plain = rows.map((r) => r.map((cell) => cell.replaceAll("**", "")));
  const widths = plain[0]!.map((_, c) => Math.max(...plain.map((r) => r[c]!.length)));
  const line = (r: string[]) =>
    r
      .map((cell, c) => (c < leftColumns ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!)))
      .join("  ")
      .trimEnd();
  return [line(plain[0]!), widths.map((w) => "-".repeat(w)).join("  "), ...plain.slice(1).map(line)].join("\n");
}

/**
 * A markdown table padded the way Biome formats markdown (so RESULTS.md passes `biome check`). `leftColumns`: how
 * many leading columns are text (left-aligned); the rest are numbers (right-aligned).
 */
export function markdownTable(rows: string[][], leftColumns = 2): string {
  const cells = rows.map((r) => r.map((cell) => cell.replaceAll("|", "\\|")));
  const width = (text: string) => [...text].length;
  const widths = cells[0]!.map((_, c) => Math.max(3, ...cells.map((r) => width(r[c]!))));
  const pad = (text: string, c: number) => {
    const fill = " ".repeat(widths[c]! - width(text));
    return c < leftColumns ? text + fill : fill + text;
  };
  const line = (r: string[]) => `| ${r.map(pad).join(" | ")} |`;
  const rule = widths.map((w, c) => (c < leftColumns ? "-".repeat(w) : `${"-".repeat(w - 1)}:`));
  return [line(cells[0]!), `| ${rule.join(" | ")} |`, ...cells.slice(1).map(line)].join("\n");
}
