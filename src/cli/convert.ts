/** `safetensors convert IN OUT`: a PyTorch checkpoint to safetensors, without executing it. */

import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { sniff } from "../format/sniff.js";
import { type ConversionReport, convertPickleFile, convertToTorchFile } from "../pickle/node-pickle.js";
import {
  convertPickleDirectory,
  type DirectoryConversionReport,
  isPickleDirectoryTarget,
} from "../pickle/node-pickle-dir.js";
import { plural } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";

const DESCRIPTION = `Convert a PyTorch checkpoint (torch.save zip, legacy or tar format) to safetensors without executing it: the
pickle is read as data and only allowlisted globals are interpreted. Refused (exit 1, no file written) when the
file names a dangerous global, or one not allowlisted unless --allow-unknown (what those build is dropped, never
built, and listed). Tied tensors (same storage and geometry) are written once; the other names are recorded in
the metadata as NAME → KEPT (as the reference's save_model does), or written in full with --clone-shared. Views
are gathered into contiguous bytes, big-endian files byte-swapped, numpy arrays become tensors. The weights are
the top-level dict, or found under state_dict / model / … (said so), or named with --key.
A directory IN (pytorch_model-0000k-of-0000N.bin + pytorch_model.bin.index.json, one pytorch_model.bin, or any
*.bin / *.pt set with its *.index.json; or the index itself) becomes OUTDIR/model-0000k-of-0000N.safetensors, one per
shard, + model.safetensors.index.json (model.safetensors for one file). Every shard is scanned and planned first: any
refusal refuses the whole directory and writes nothing. OUTDIR may be IN (only model*.safetensors files and their
index are written or replaced there).
The way back: a safetensors IN is written as a torch zip checkpoint (protocol 2, allowlisted globals only, records
aligned to 64 bytes) that torch.load(weights_only=True) reads; metadata NAME → KEPT entries become tied tensors.`;

function text(input: string, output: string, r: ConversionReport): string {
  const where = r.key.length
    ? ` from entry ${JSON.stringify(r.key.join("."))}${r.keyFound === "automatic" ? " (found automatically)" : ""}`
    : "";
  const lines = [
    `${input} -> ${output}: ${plural(r.tensors.length, "tensor")}, ${plural(r.bytesWritten, "byte")}${where}`,
  ];
  for (const [removed, kept] of r.aliases) lines.push(`  tied: ${removed} = ${kept} (written once)`);
  for (const e of r.nonTensors) lines.push(`  not a tensor: ${e.name} (${e.type})`);
  for (const d of r.dropped) lines.push(`  dropped (not allowlisted): ${d.name} built from ${d.globals.join(", ")}`);
  if (r.otherEntries.length) lines.push(`  other top-level entries left out: ${r.otherEntries.join(", ")}`);
  return `${lines.join("\n")}\n`;
}

export const command = defineCommand({
  usage:
    "convert IN OUT.safetensors [--key KEY] [--allow-unknown] [--clone-shared] [--json]\nconvert DIR|INDEX OUTDIR [--key KEY] [--allow-unknown] [--clone-shared] [--json]\nconvert IN.safetensors OUT.bin [--json]",
  description: DESCRIPTION,
  options: {
    key: { type: "string", value: "KEY", help: "the entry holding the weights (state_dict, model, a.b)" },
    "allow-unknown": { type: "boolean", help: "convert despite non-allowlisted globals; what they build is dropped" },
    "clone-shared": { type: "boolean", help: "write every name of a tied tensor in full" },
    json: { type: "boolean", help: "print the conversion report as JSON" },
  },
  run({ values, positionals }, { io }) {
    return convert(values, positionals, io);
  },
});

/** The way back is chosen by content, not by name: a safetensors IN becomes a torch checkpoint. */
function isSafetensorsFile(file: string): boolean {
  let fd: number | null = null;
  try {
    fd = fs.openSync(file, "r");
    const head = new Uint8Array(64);
    const n = fs.readSync(fd, head, 0, head.length, 0);
    return sniff(head.subarray(0, n), { fileLength: fs.fstatSync(fd).size }).format === "safetensors";
  } catch {
    return false;
  } finally {
    if (fd !== null) fs.closeSync(fd);
  }
}

function reportJson(input: string, output: string, report: ConversionReport) {
  return {
    input,
    output,
    key: report.key,
    keyFound: report.keyFound,
    tensors: report.tensors,
    aliases: Object.fromEntries(report.aliases),
    metadata: Object.fromEntries(report.metadata),
    nonTensors: report.nonTensors,
    dropped: report.dropped,
    otherEntries: report.otherEntries,
    verdict: report.scan.verdict,
    globals: report.scan.globals.map((g) => ({
      global: g.global,
      verdict: g.verdict,
      uses: [...g.uses],
      pickle: g.pickle,
    })),
    bytesWritten: report.bytesWritten,
  };
}

function directoryText(r: DirectoryConversionReport): string {
  const tensors = r.shards.reduce((n, s) => n + s.report.tensors.length, 0);
  const head = `${r.input} -> ${r.output}: ${plural(r.shards.length, "shard")}, ${plural(tensors, "tensor")}, ${plural(r.bytesWritten, "byte")}${r.outputIndex ? `, index ${path.basename(r.outputIndex)}` : ""}`;
  const lines = [head];
  for (const s of r.shards) {
    const shard = text(path.basename(s.input), path.basename(s.output), s.report).trimEnd();
    lines.push(...shard.split("\n").map((line) => `  ${line}`));
  }
  for (const w of r.warnings) lines.push(`  warning: ${w}`);
  return `${lines.join("\n")}\n`;
}

function convert(
  values: { key?: string; "allow-unknown"?: boolean; "clone-shared"?: boolean; json?: boolean },
  positionals: string[],
  io: { stdout: (text: string) => void },
): number {
  if (positionals.length !== 2) throw new UsageError("convert takes IN and OUT");
  const [input, output] = positionals as [string, string];
  const options = {
    ...(values.key !== undefined ? { key: values.key } : {}),
    allowUnknown: values["allow-unknown"] === true,
    cloneShared: values["clone-shared"] === true,
  };
  if (isPickleDirectoryTarget(input)) {
    if (/\.safetensors$/i.test(output)) {
      throw new UsageError("IN is a checkpoint directory or index: OUT must be a directory (OUTDIR)");
    }
    const r = convertPickleDirectory(input, output, options);
    const json = {
      input,
      output,
      index: r.index,
      outputIndex: r.outputIndex,
      totalSize: r.totalSize,
      bytesWritten: r.bytesWritten,
      tensors: r.shards.reduce((n, s) => n + s.report.tensors.length, 0),
      shards: r.shards.map((s) => reportJson(s.input, s.output, s.report)),
      warnings: r.warnings,
    };
    io.stdout(values.json ? `${JSON.stringify(json)}\n` : directoryText(r));
    return 0;
  }
  try {
    if (fs.realpathSync(input) === path.resolve(fs.realpathSync(path.dirname(output)), path.basename(output))) {
      throw new SafetensorError("InvalidOption", "convert: OUT is the same file as IN");
    }
  } catch (error) {
    if (error instanceof SafetensorError) throw error;
  }
  if (isSafetensorsFile(input)) {
    if (/\.safetensors$/i.test(output)) {
      throw new UsageError("IN is already safetensors; to write a PyTorch checkpoint name OUT .bin, .pt or .pth");
    }
    const back = convertToTorchFile(input, output);
    const summary = {
      input,
      output,
      tensors: back.tensors,
      aliases: Object.fromEntries(back.aliases),
      bytesWritten: back.bytesWritten,
    };
    io.stdout(
      values.json
        ? `${JSON.stringify(summary)}\n`
        : `${input} -> ${output}: torch zip checkpoint, ${plural(back.tensors, "tensor")}${back.aliases.size ? ` (+${back.aliases.size} tied)` : ""}, ${plural(back.bytesWritten, "byte")}\n`,
    );
    return 0;
  }
  const report = convertPickleFile(input, output, options);
  if (values.json) {
    io.stdout(`${JSON.stringify(reportJson(input, output, report))}\n`);
  } else {
    io.stdout(text(input, output, report));
  }
  return 0;
}
