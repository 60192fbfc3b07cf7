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
    summary: "tensor table with totals by dtype and parameter count",
    load: () => import("./inspect.js"),
  },
  { name: "validate", summary: "check files: ok, or error[CODE] and why", load: () => import("./validate.js") },
  {
    name: "hash",
    summary: "SHA-256 of files (sha256sum format) and of each tensor's bytes",
    load: () => import("./hash.js"),
  },
  { name: "get", summary: "write a tensor (or a slice of it) as raw bytes", load: () => import("./get.js") },
  { name: "doctor", summary: "which read backends this installation has", load: () => import("./doctor.js") },
  { name: "scan", summary: "globals a PyTorch checkpoint names, and a verdict", load: () => import("./scan.js") },
  {
    name: "convert",
    summary: "PyTorch checkpoint to safetensors, never executing it",
    load: () => import("./convert.js"),
  },
];
