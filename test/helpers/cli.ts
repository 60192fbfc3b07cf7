/** Running the CLI in tests as a real process from the sources (in-process: run-cli.ts). */
import { type SpawnSyncOptions, spawn, spawnSync } from "node:child_process";

/**
 * The CLI as a separate process from the sources (as bin/safetensors.js runs them without dist/). A placeholder
 * comes first: node would take a first argument "inspect" after -e for its debugger.
 */
function processArgs(args: string[]): string[] {
  const entry = new URL("../../src/cli/main.ts", import.meta.url).href;
  const script = `import(${JSON.stringify(entry)}).then(async (m) => { process.exitCode = await m.main(process.argv.slice(2)); })`;
  return ["--import", "tsx", "-e", script, "safetensors", ...args];
}

export function cliProcess(args: string[]) {
  return spawn(process.execPath, processArgs(args), { stdio: ["pipe", "pipe", "pipe"] });
}

/** Run to the end with `input` on standard input (a pipe), or a file descriptor as standard input. */
export function cliProcessSync(args: string[], stdin: { input: Uint8Array } | { fd: number }) {
  const options: SpawnSyncOptions = "input" in stdin ? { input: stdin.input } : { stdio: [stdin.fd, "pipe", "pipe"] };
  return spawnSync(process.execPath, processArgs(args), { ...options, maxBuffer: 64 << 20, encoding: "buffer" });
}
