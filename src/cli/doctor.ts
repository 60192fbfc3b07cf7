import { nativeStatus } from "../io/native.js";

/** What `safetensors doctor` prints: the runtime and which read backends are available. */
export function backendReport(): string {
  const native = nativeStatus();
  const lines = [
    `node ${process.versions.node} (${process.platform}-${process.arch})`,
    `native addon: ${native.available ? `loaded from ${native.path}` : `not available (${native.reason})`}`,
    `backends: pread${native.available ? ", mmap" : ""}`,
    `default backend (auto): ${native.available ? "mmap" : "pread"}`,
  ];
  return `${lines.join("\n")}\n`;
}
