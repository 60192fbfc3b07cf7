import { nativeStatus } from "../io/native.js";
import { defineCommand } from "./command.js";

const ORIGIN = { prebuild: "prebuilt binary shipped in the package", build: "built from source" } as const;

/** What `safetensors doctor` prints: the runtime and which read backends are available. */
export function backendReport(): string {
  const native = nativeStatus();
  const lines = [
    `node ${process.versions.node} (${process.platform}-${process.arch})`,
    `native addon: ${native.available ? `loaded from ${native.path} (${ORIGIN[native.origin ?? "build"]})` : `not available (${native.reason})`}`,
    ...(native.available ? (native.skipped ?? []).map((line) => `  passed over: ${line}`) : []),
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
