/** `safetensors scan FILE… [--json]`: the globals a PyTorch checkpoint names, where, and a verdict. */
import { isSafetensorError } from "../format/errors.js";
import type { Verdict } from "../pickle/globals.js";
import { scanPickleFile } from "../pickle/node-pickle.js";
import type { ScanReport } from "../pickle/scan.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";

const DESCRIPTION = `Read PyTorch checkpoints (zip, legacy, tar, plain pickle) as data, never executing them, and list every global
their pickles name: the verdict (safe = on the allowlist, unknown, dangerous = known to run code or reach the
system), how it is used (call, instantiate, build, persistent-id, reference), the pickle and byte offsets. A
pickle that cannot be read is never safe. Exit status 0 only when every file is safe, else 1.
--json prints {"verdict","files":[{"file","verdict","format","globals":[…],"errors":[…]}]}.`;

function worst(verdicts: Verdict[]): Verdict {
  return verdicts.includes("dangerous") ? "dangerous" : verdicts.includes("unknown") ? "unknown" : "safe";
}

function formatText(file: string, report: ScanReport): string {
  const lines = [`${file}: ${report.verdict}${report.format ? ` (${report.format})` : ""}`];
  for (const g of report.globals) {
    const resolved = g.resolved !== g.global ? ` (= ${g.resolved})` : "";
    lines.push(
      `  ${g.verdict.padEnd(9)} ${g.global}${resolved}  ${g.uses.join(",")}  in ${g.pickle} at byte ${g.offsets.join(",")}`,
    );
  }
  for (const e of report.errors) lines.push(`  error[${e.code}] in ${e.where}: ${e.message}`);
  return `${lines.join("\n")}\n`;
}

export const command = defineCommand({
  usage: "scan FILE... [--json]",
  description: DESCRIPTION,
  options: {
    json: { type: "boolean", help: "print JSON" },
  },
  run({ values, positionals }, { io }) {
    if (positionals.length === 0) throw new UsageError("scan takes one or more FILEs");
    return scan(values, positionals, io);
  },
});

function scan(values: { json?: boolean }, positionals: string[], io: { stdout: (text: string) => void }): number {
  const files: (ScanReport & { file: string })[] = [];
  for (const file of positionals) {
    let report: ScanReport;
    try {
      report = scanPickleFile(file);
    } catch (error) {
      if (!isSafetensorError(error)) throw error;
      report = {
        verdict: "unknown",
        format: null,
        globals: [],
        errors: [{ where: "file", code: error.code, message: error.message }],
      };
    }
    files.push({ file, ...report });
    if (!values.json) io.stdout(formatText(file, report));
  }
  const verdict = worst(files.map((f) => f.verdict));
  if (values.json) {
    const json = files.map((f) => ({
      file: f.file,
      verdict: f.verdict,
      format: f.format,
      globals: f.globals.map((g) => ({ ...g, uses: [...g.uses], offsets: [...g.offsets] })),
      errors: f.errors,
    }));
    io.stdout(`${JSON.stringify({ verdict, files: json })}\n`);
  }
  return verdict === "safe" ? 0 : 1;
}
