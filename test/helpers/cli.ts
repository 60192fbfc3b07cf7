/** Running the CLI in tests as a real process from the sources (in-process: run-cli.ts). */
import { type SpawnSyncOptions, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { buildSync } from "esbuild";
import { loaderArgs, moduleUrl } from "./compiled.js";
import { repoRoot } from "./corpus.js";

/**
 * The CLI as a separate process from the sources (as bin/safetensors.js runs them without dist/), or their compiled
 * twins under `npm test` (helpers/compiled.ts). A placeholder comes first: node would take a first argument "inspect"
 * after -e for its debugger.
 */
function processArgs(args: string[]): string[] {
  const entry = moduleUrl(path.join(repoRoot, "src/cli/main.ts"));
  const script = `import(${JSON.stringify(entry)}).then(async (m) => { process.exitCode = await m.main(process.argv.slice(2)); })`;
  return [...loaderArgs, "-e", script, "safetensors", ...args];
}

export function cliProcess(args: string[]) {
  return spawn(process.execPath, processArgs(args), { stdio: ["pipe", "pipe", "pipe"] });
}

let bundle: string | undefined;

/**
 * The CLI's sources bundled by esbuild once per test file (as tsx transforms them, one module), in a scratch root
 * with links to package.json, build/ (the addon) and node_modules/, two folders below it as the addon loaders and
 * package.json's reader expect. A process of it starts in ~0.15 s of CPU where one through tsx took ~0.8 s (2026-12-02,
 * 2 cores): test/cli-manners.test.ts's 25 processes over standard input took 19.8 s of the suite.
 */
function bundledCli(): string {
  if (bundle !== undefined) return bundle;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "st-cli-bundle-"));
  process.on("exit", () => fs.rmSync(root, { recursive: true, force: true }));
  for (const name of ["package.json", "build", "prebuilds", "node_modules"]) {
    const target = path.join(repoRoot, name);
    if (fs.existsSync(target)) fs.symlinkSync(target, path.join(root, name));
  }
  const outdir = path.join(root, "bundle", "cli");
  buildSync({
    // The worker threads beside the chunk that starts them, as scripts/bundle-cli.mjs places them.
    entryPoints: {
      cli: path.join(repoRoot, "src/cli/main.ts"),
      "gguf-worker": path.join(repoRoot, "src/gguf/node-quant-worker.ts"),
      "merge-worker": path.join(repoRoot, "src/merge/node-worker.ts"),
    },
    outdir,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    packages: "external",
    logLevel: "silent",
  });
  bundle = pathToFileURL(path.join(outdir, "cli.js")).href;
  return bundle;
}

/**
 * Run to the end with `input` on standard input (a pipe), or a file descriptor as standard input: the sources bundled
 * (bundledCli), as a process of their own.
 */
export function cliProcessSync(args: string[], stdin: { input: Uint8Array } | { fd: number }) {
  const options: SpawnSyncOptions = "input" in stdin ? { input: stdin.input } : { stdio: [stdin.fd, "pipe", "pipe"] };
  const script = `import(${JSON.stringify(bundledCli())}).then(async (m) => { process.exitCode = await m.main(process.argv.slice(2)); })`;
  return spawnSync(process.execPath, ["-e", script, "safetensors", ...args], {
    ...options,
    maxBuffer: 64 << 20,
    encoding: "buffer",
  });
}
