/** `safetensors patch create|apply|info`: delta patches between two versions of a file (src/integrity/patch-*.ts). */

import { applyPatch, readPatchPlan } from "../integrity/patch-apply.js";
import { createPatch } from "../integrity/patch-create.js";
import { PATCH_VERSION, type PatchPlan } from "../integrity/patch-format.js";
import { plural } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import type { Io } from "./io.js";

function fileLines(plan: PatchPlan): string {
  if (plan.version === PATCH_VERSION) {
    const base = plan.base[0];
    const target = plan.target[0];
    return `base   ${base?.sha256}  ${base?.size} bytes\ntarget ${target?.sha256}  ${target?.size} bytes\n`;
  }
  const how = (t: PatchPlan["target"][number]) =>
    t.copy !== undefined
      ? `copy of ${JSON.stringify(plan.base[t.copy]?.name)}`
      : t.data !== undefined
        ? "stored"
        : "patched";
  return (
    plan.base.map((b) => `base   ${b.sha256}  ${b.size} bytes  ${JSON.stringify(b.name)}\n`).join("") +
    plan.target.map((t) => `target ${t.sha256}  ${t.size} bytes  ${JSON.stringify(t.name)} (${how(t)})\n`).join("")
  );
}

function summaryLines(plan: PatchPlan): string {
  const s = plan.summary;
  const list = (label: string, names: readonly string[] | undefined) =>
    names && names.length > 0 ? `${label} (${names.length}): ${names.map((n) => JSON.stringify(n)).join(", ")}\n` : "";
  return (
    fileLines(plan) +
    `${s.same ?? 0} tensors unchanged\n` +
    list("changed rows", s.rowPatched) +
    list("changed", s.changed) +
    list("added", s.added) +
    list("removed", s.removed) +
    list(
      "renamed",
      (s.renamed ?? []).map(([a, b]) => `${a} -> ${b}`),
    ) +
    (s.metadataChanged ? "metadata changed\n" : "")
  );
}

function report(io: Io, json: boolean | undefined, plan: PatchPlan, extra: Record<string, unknown>): number {
  if (json)
    io.stdout(
      `${JSON.stringify({ ...extra, base: plan.base, target: plan.target.map(({ tensors, ...ref }) => ref), summary: plan.summary })}\n`,
    );
  else io.stdout(summaryLines(plan));
  return 0;
}

export const command = defineCommand({
  usage:
    "patch create OLD|DIR NEW|DIR OUT [--json]\npatch apply OLD|DIR PATCH OUT|OUTDIR [--fsync] [--json]\npatch info PATCH [--json]",
  description: `Delta patches: "create" writes OUT, a patch holding only what OLD lacks to become NEW: tensors that changed
(only their changed rows along dim 0 when the dtype and shape stayed), added ones, NEW's header bytes, and the
SHA-256 and size of OLD and NEW. Unchanged and renamed tensors are taken from OLD. The patch is itself a valid
.safetensors file (its layout: README, "Delta patches").

"apply" rebuilds NEW from OLD and PATCH into OUT, byte for byte. OLD must be the patch's base: another file
(different size or SHA-256) is refused with error[PatchBaseMismatch] and nothing is written. OUT is written
atomically through a temporary file, and renamed into place only when its SHA-256 is NEW's (else
error[PatchTargetMismatch], nothing written). OUT may be OLD itself (updated in place, atomically).

OLD and NEW may be sharded checkpoints (a directory or its model.safetensors.index.json), as for diff and manifest:
the patch (one file) then lists every file of both (version 2). A NEW shard equal to an OLD file is a copy; a tensor
that moved to another shard is taken from its old shard; the index is stored whole. "apply" then checks every OLD
file it lists (size and SHA-256) before writing anything, writes each NEW file under a staging name in OUT (a
directory; OLD's own directory updates it in place), each verified against NEW's SHA-256, and switches OUT to the
new set in one commit (a kill at any point leaves OUT as it was or as NEW).

"info" prints what a patch changes. --json prints {"base","target","summary"} (plus "patch_bytes" for create).
Exit status 0 on success, 1 when refused or on invalid input.`,
  options: {
    json: { type: "boolean", help: "print the result as JSON" },
    fsync: { type: "boolean", help: "fsync the output and its directory before returning" },
  },
  run({ values, positionals }, { io }) {
    const [action, ...args] = positionals;
    if (action === "create") {
      if (args.length !== 3) throw new UsageError("patch create takes OLD NEW OUT");
      const result = createPatch(args[0]!, args[1]!, args[2]!, { fsync: values.fsync });
      if (!values.json) io.stdout(`wrote ${args[2]} (${result.bytes} bytes)\n`);
      return report(io, values.json, result.plan, { patch_bytes: result.bytes });
    }
    if (action === "apply") {
      if (args.length !== 3) throw new UsageError("patch apply takes OLD PATCH OUT");
      const result = applyPatch(args[0]!, args[1]!, args[2]!, { fsync: values.fsync });
      if (values.json) report(io, true, result.plan, { file: args[2] });
      else if (result.plan.version === PATCH_VERSION)
        io.stdout(`wrote ${args[2]} (${plural(result.size, "byte")}, sha256 ${result.sha256}, verified)\n`);
      else
        io.stdout(
          `wrote ${args[2]} (${plural(result.files.length, "file")}, ${plural(result.size, "byte")}, each verified)\n`,
        );
      return 0;
    }
    if (action === "info") {
      if (args.length !== 1) throw new UsageError("patch info takes PATCH");
      return report(io, values.json, readPatchPlan(args[0]!), {});
    }
    throw new UsageError("patch takes create, apply or info");
  },
});
