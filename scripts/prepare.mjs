#!/usr/bin/env node
// The "prepare" script of a checkout: the native addon (scripts/build-native.mjs), then dist/ (tsc, the library and
// CLI bundles, the inspector page), as `npm run build` makes it. Skipped when nothing it reads changed since its last
// complete run.
//
// Why the skip: npm runs "prepare" not only at `npm install`, but again at the first `npx safetensors` (or
// `npm exec safetensors`) in a checkout, because npm exec links the checkout into its cache and prepares it. That
// rebuilt everything before the command ran: 39.9 s for `npx safetensors --version` in a fresh clone after
// `npm ci`, at a load of 9 on 2 cores (2026-12-02), where `node bin/safetensors.js --version` took 0.26 s.
//
// The stamp dist/.prepare-stamp records the last complete run: the Node ABI, platform and architecture, whether
// SAFETENSORS_NO_NATIVE was set and whether the addon was built. The steps run again when any input (a file or folder
// below) is newer than the stamp, when one of those differs, or when an output is missing. SAFETENSORS_REBUILD=1
// forces them.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = join(fileURLToPath(import.meta.url), "..", "..");

/** What the steps read: source folders (walked, folders included: a deleted file changes its folder) and files. */
export const INPUT_DIRS = ["src", "native", "inspector"];
export const INPUT_FILES = [
  "package.json",
  "package-lock.json",
  "binding.gyp",
  "tsconfig.json",
  "tsconfig.build.json",
  "scripts/prepare.mjs",
  "scripts/build-native.mjs",
  "scripts/native-tools.mjs",
  "scripts/bundle-lib.mjs",
  "scripts/bundle-cli.mjs",
  "scripts/esbuild-builtins.mjs",
  "scripts/build-inspector.mjs",
];
/** What the steps write, and what the CLI and the package's exports load. */
export const OUTPUTS = ["dist/node.d.ts", "dist/lib/node.js", "dist/lib/index.js", "dist/bundle/cli.js"];
export const STAMP = "dist/.prepare-stamp";
const ADDON = "build/Release/safetensors_native.node";

/** This machine and environment, as the stamp records them. */
export function currentConditions(root = here, env = process.env) {
  return {
    abi: process.versions.modules,
    platform: process.platform,
    arch: process.arch,
    noNative: Boolean(env.SAFETENSORS_NO_NATIVE && !/^(0|false|no|off)$/i.test(env.SAFETENSORS_NO_NATIVE)),
    addon: existsSync(join(root, ADDON)),
  };
}

function newestMtime(path) {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (stat === undefined) return 0;
  let newest = stat.mtimeMs;
  if (stat.isDirectory()) {
    for (const name of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, name)));
  }
  return newest;
}

/** Why the steps must run (a sentence), or undefined when everything they would make is current. */
export function staleReason(root = here, conditions = currentConditions(root)) {
  const stampPath = join(root, STAMP);
  const stampStat = statSync(stampPath, { throwIfNoEntry: false });
  if (stampStat === undefined) return "no earlier build";
  const missing = OUTPUTS.find((output) => !existsSync(join(root, output)));
  if (missing !== undefined) return `${missing} is missing`;
  let recorded;
  try {
    recorded = JSON.parse(readFileSync(stampPath, "utf8"));
  } catch {
    return `${STAMP} is unreadable`;
  }
  for (const [key, value] of Object.entries(conditions)) {
    // The addon: built before and gone now is a reason; never built (no compiler) and still absent is not.
    if (key === "addon" && (value || !recorded.addon)) continue;
    if (recorded[key] !== value) return `${key} was ${JSON.stringify(recorded[key])}, now ${JSON.stringify(value)}`;
  }
  for (const input of [...INPUT_DIRS, ...INPUT_FILES]) {
    if (newestMtime(join(root, input)) > stampStat.mtimeMs) return `${input} changed`;
  }
  return undefined;
}

function main() {
  const forced = /^(1|true|yes|on)$/i.test(process.env.SAFETENSORS_REBUILD ?? "");
  const reason = forced ? "SAFETENSORS_REBUILD is set" : staleReason();
  if (reason === undefined) {
    console.log("safetensors-ts: dist/ and the addon are current; nothing to prepare (SAFETENSORS_REBUILD=1 rebuilds)");
    return 0;
  }
  const tsc = join(here, "node_modules", "typescript", "bin", "tsc");
  const steps = [
    ["scripts/build-native.mjs"],
    [tsc, "-p", "tsconfig.build.json"],
    ["scripts/bundle-lib.mjs"],
    ["scripts/bundle-cli.mjs"],
    ["scripts/build-inspector.mjs"],
  ];
  for (const args of steps) {
    const run = spawnSync(process.execPath, args, { cwd: here, stdio: "inherit" });
    if (run.status !== 0) return run.status ?? 1;
  }
  writeFileSync(join(here, STAMP), `${JSON.stringify(currentConditions())}\n`);
  return 0;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) process.exitCode = main();
