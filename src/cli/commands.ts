/**
 * Every `safetensors` command: name, one-line summary, and its module (loaded only when the command runs or its
 * help is asked for, so a command's dependencies never slow the others' start). Adding a command: one file in
 * this folder exporting `command` (see `command.ts`), and one line here.
 */
import type { Command } from "./command.js";

export interface CommandEntry {
  name: string;
  summary: string;
  load: () => Promise<{ command: Command }>;
}

export const COMMANDS: readonly CommandEntry[] = [
  {
    name: "inspect",
    summary: "what a file holds: metadata facts, tensors, totals (--metadata, --tensors: in full)",
    load: () => import("./inspect.js"),
  },
  { name: "validate", summary: "check files: ok, or error[CODE] and why", load: () => import("./validate.js") },
  {
    name: "hash",
    summary: "SHA-256 of files (sha256sum format) and of each tensor's bytes",
    load: () => import("./hash.js"),
  },
  {
    name: "get",
    summary: "write a tensor (or a slice of it) as a .npy file or raw bytes",
    load: () => import("./get.js"),
  },
  {
    name: "shard",
    summary: "split into huggingface_hub's shards and index (byte copies)",
    load: () => import("./shard.js"),
  },
  { name: "merge", summary: "a sharded checkpoint into one file (byte copies)", load: () => import("./merge.js") },
  {
    name: "merge-models",
    summary: "merge models as a mergekit YAML config says, streamed",
    load: () => import("./merge-models.js"),
  },
  {
    name: "lora",
    summary: "bake PEFT LoRA adapters (or Kohya LoRAs) into a model, or extract one from a fine-tune by SVD",
    load: () => import("./lora.js"),
  },
  {
    name: "extract",
    summary: "copy the named or matching tensors into a new file",
    load: () => import("./extract.js"),
  },
  { name: "drop", summary: "copy all but the named or matching tensors", load: () => import("./drop.js") },
  { name: "rename", summary: "rename tensors (--map OLD=NEW or --sub REGEX=REPL)", load: () => import("./rename.js") },
  {
    name: "set-metadata",
    summary: "set, delete or clear __metadata__ entries",
    load: () => import("./set-metadata.js"),
  },
  { name: "cast", summary: "float tensors to bf16/f16/f32 as torch rounds", load: () => import("./cast.js") },
  { name: "edit", summary: "overwrite a tensor slice in place (journaled, verified)", load: () => import("./edit.js") },
  {
    name: "apply-mask",
    summary: "zero weights a mask drops, in place (journaled)",
    load: () => import("./apply-mask.js"),
  },
  { name: "recover", summary: "roll back an interrupted in-place edit", load: () => import("./recover.js") },
  { name: "load-rank", summary: "a tensor-parallel rank's part of tensors", load: () => import("./load-rank.js") },
  { name: "view", summary: "web inspector for a file, checkpoint or URL (127.0.0.1)", load: () => import("./view.js") },
  {
    name: "manifest",
    summary: "integrity manifests: create, sign (a Sigstore bundle; Ed25519 or ECDSA key), verify",
    load: () => import("./manifest.js"),
  },
  { name: "diff", summary: "tensor and metadata differences between two checkpoints", load: () => import("./diff.js") },
  {
    name: "patch",
    summary: "delta patches: create OLD NEW OUT, apply OLD PATCH OUT",
    load: () => import("./patch.js"),
  },
  { name: "doctor", summary: "which read backends this installation has", load: () => import("./doctor.js") },
  { name: "scan", summary: "globals a PyTorch checkpoint names, and a verdict", load: () => import("./scan.js") },
  {
    name: "convert",
    summary: "PyTorch checkpoint to safetensors, never executing it",
    load: () => import("./convert.js"),
  },
  {
    name: "to-gguf",
    summary: "a model folder to GGUF for llama.cpp (f16, bf16, q8_0, q4_0...)",
    load: () => import("./to-gguf.js"),
  },
  {
    name: "from-gguf",
    summary: "a GGUF file back to a safetensors checkpoint with config.json",
    load: () => import("./from-gguf.js"),
  },
];
