import { nativeStatus, type WindowsStatus } from "../io/native.js";
import { copyAddonStatus } from "../io/node-copy.js";
import { defineCommand } from "./command.js";

const ORIGIN = { prebuild: "prebuilt binary shipped in the package", build: "built from source" } as const;

/** The runtime: Node's version, or Bun's or Deno's (each also reports the Node version it is compatible with). */
function runtimeName(): string {
  const versions = process.versions as Record<string, string | undefined>;
  if (versions.bun !== undefined) return `bun ${versions.bun} (node ${process.versions.node} compatible)`;
  if (versions.deno !== undefined) return `deno ${versions.deno} (node ${process.versions.node} compatible)`;
  return `node ${process.versions.node}`;
}

function windowsLine(windows: WindowsStatus): string {
  if (windows.uncounted) return `not counted by V8 (${windows.path}, ${ORIGIN[windows.origin ?? "build"]})`;
  return `counted as external memory by the engine, so opening a large file may start a full GC (${windows.reason})`;
}

/** What `safetensors doctor` prints: the runtime and which read backends are available. */
export function backendReport(): string {
  const native = nativeStatus();
  const copy = copyAddonStatus();
  const lines = [
    `${runtimeName()} (${process.platform}-${process.arch})`,
    `native addon: ${native.available ? `loaded from ${native.path} (${ORIGIN[native.origin ?? "build"]})` : `not available (${native.reason})`}`,
    ...(native.available ? (native.skipped ?? []).map((line) => `  passed over: ${line}`) : []),
    ...(native.windows === undefined ? [] : [`mapped views: ${windowsLine(native.windows)}`]),
    `copy addon: ${copy.available ? `loaded from ${copy.path} (${ORIGIN[copy.origin]}): copies stay in the kernel (copy_file_range) or bypass the page cache` : `not available (${copy.reason}): copies read and write through a buffer`}`,
    `backends: pread${native.available ? ", mmap" : ""}`,
    `default backend (auto): ${native.available ? "mmap" : "pread"}`,
  ];
  return `${lines.join("\n")}\n`;
}

export const command = defineCommand({
  usage: "doctor",
  description: "Print the Node.js runtime, whether the native addon loaded (and why not), and the read backends.",
  options: {},
  run(_args, { io }) {
    io.stdout(backendReport());
    return 0;
  },
});
