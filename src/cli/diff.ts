/** `safetensors diff A B`: tensor by tensor and metadata differences; exit status as diff(1) (0 same, 1 differ, 2 error). */
import { isSafetensorError } from "../format/errors.js";
import { type CheckpointDiff, diffCheckpoints, type TensorDiff, type TensorSide } from "../integrity/diff.js";
import { explainInputError } from "../read/node-input.js";
import { plural } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";

const shown = (s: TensorSide | undefined) => (s ? `${s.dtype} [${s.shape.join(", ")}]` : "");
const SHOWN_RANGES = 8;

function rangesText(t: TensorDiff): string {
  const rows = (t.rows ?? []).slice(0, SHOWN_RANGES).map(([a, b]) => (b - a === 1 ? `${a}` : `${a}:${b}`));
  const more = (t.rowRanges ?? 0) > rows.length ? `, … (${t.rowRanges} ranges)` : "";
  return `${rows.join(", ")}${more}`;
}

function line(t: TensorDiff): string {
  const name = JSON.stringify(t.name);
  switch (t.status) {
    case "changed": {
      const nan = t.nanElements ? `, ${t.nanElements} with NaN` : "";
      return `changed  ${name}  ${shown(t.a)}: ${t.elements} of ${t.total} elements differ, max |a-b| ${t.maxAbsDiff}${nan}; rows ${rangesText(t)}\n`;
    }
    case "only_a":
      return `only in A  ${name}  ${shown(t.a)}\n`;
    case "only_b":
      return `only in B  ${name}  ${shown(t.b)}\n`;
    default:
      return `${t.status === "dtype_changed" ? "dtype" : "shape"} changed  ${name}  ${shown(t.a)} -> ${shown(t.b)}${t.sameBytes ? " (same bytes)" : ""}\n`;
  }
}

function text(result: CheckpointDiff): string {
  let out = "";
  for (const t of result.tensors) if (t.status !== "same") out += line(t);
  for (const m of result.metadata) {
    const key = JSON.stringify(m.key);
    if (m.a === undefined) out += `metadata only in B  ${key}: ${JSON.stringify(m.b)}\n`;
    else if (m.b === undefined) out += `metadata only in A  ${key}: ${JSON.stringify(m.a)}\n`;
    else out += `metadata changed  ${key}: ${JSON.stringify(m.a)} -> ${JSON.stringify(m.b)}\n`;
  }
  const counts = new Map<string, number>();
  for (const t of result.tensors) counts.set(t.status, (counts.get(t.status) ?? 0) + 1);
  const parts = [...counts].map(([status, n]) => `${n} ${status.replace("_", " ")}`);
  out += `${result.same ? "same" : "differ"}: ${parts.join(", ") || "no tensors"}${result.metadata.length ? `, ${plural(result.metadata.length, "metadata key")} ${result.metadata.length === 1 ? "differs" : "differ"}` : ""}\n`;
  return out;
}

function json(result: CheckpointDiff): string {
  const tensors = result.tensors.map((t) => ({
    name: t.name,
    status: t.status,
    ...(t.a ? { a: t.a } : {}),
    ...(t.b ? { b: t.b } : {}),
    ...(t.status === "changed"
      ? {
          elements: t.elements,
          total: t.total,
          // JSON has no Infinity: a difference to or from an infinity is the string "Infinity".
          max_abs_diff: Number.isFinite(t.maxAbsDiff) ? t.maxAbsDiff : String(t.maxAbsDiff),
          nan_elements: t.nanElements,
          changed_rows: t.changedRows,
          row_ranges: t.rowRanges,
          rows: t.rows,
        }
      : {}),
    ...(t.sameBytes !== undefined ? { same_bytes: t.sameBytes } : {}),
  }));
  return `${JSON.stringify({ same: result.same, tensors, metadata: result.metadata, warnings: result.warnings })}\n`;
}

export const command = defineCommand({
  usage: "diff A B [--json] [--max-row-ranges N]",
  description: `Compare two safetensors files or sharded checkpoints (directories or index files), tensor by tensor, and
their metadata. Tensors of the same name, dtype and shape are compared chunk by chunk: equal bytes are found by byte
comparison and never decoded; a changed tensor shows how many elements differ (bit patterns: -0 and +0 differ), the
largest absolute difference of their values decoded as float, and the changed row ranges along dim 0
(A:B = rows A to B-1). Also listed: tensors only in A or only in B, tensors whose dtype or shape changed (and whether
their bytes are the same), metadata keys added, removed or changed. Same tensors are not listed, only counted.

--json prints {"same","tensors":[{"name","status","a","b",...}],"metadata":[{"key","a","b"}],"warnings"}, every
tensor included; status is same, changed, only_a, only_b, dtype_changed or shape_changed; a changed tensor has
"elements","total","max_abs_diff","nan_elements","changed_rows","row_ranges" and "rows" (the first N ranges,
--max-row-ranges, default 1000).
Exit status as diff(1): 0 when the same, 1 when they differ, 2 on error.`,
  options: {
    json: { type: "boolean", help: "print the differences as JSON" },
    "max-row-ranges": { type: "string", value: "N", help: "row ranges listed per tensor in --json (default 1000)" },
  },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("diff takes A and B");
    const max = values["max-row-ranges"];
    const maxRowRanges = max === undefined ? undefined : Number(max);
    if (maxRowRanges !== undefined && !(Number.isSafeInteger(maxRowRanges) && maxRowRanges >= 0)) {
      throw new UsageError(`--max-row-ranges must be a non-negative integer (got ${JSON.stringify(max)})`);
    }
    let result: CheckpointDiff;
    try {
      result = diffCheckpoints(positionals[0]!, positionals[1]!, { maxRowRanges });
    } catch (error) {
      // diff(1)'s convention: trouble is 2, not 1 (which means "they differ").
      if (!isSafetensorError(error)) throw error;
      const explained = explainInputError(error, positionals);
      io.stderr(`error[${explained.code}]: ${explained.message}\n`);
      return 2;
    }
    for (const warning of result.warnings) io.stderr(`warning: ${warning}\n`);
    io.stdout(values.json ? json(result) : text(result));
    return result.same ? 0 : 1;
  },
});
