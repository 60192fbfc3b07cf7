#!/usr/bin/env node
// Builds the optional native addons (native/, binding.gyp: safetensors_native, safetensors_copy, safetensors_v8) into
// build/Release/, unless a prebuilt binary shipped in the package (prebuilds/, made at pack time by
// scripts/prebuild.mjs) already fits this Node.
//
// Run by a checkout's `npm install` (the "prepare" script), and by hand where no prebuilt binary fits (another OS or
// CPU, musl): `node node_modules/safetensors-ts/scripts/build-native.mjs`. The package has no install script: its
// users get the prebuilt binaries, or the pure JavaScript paths, and npm (or pnpm, or Bun) has nothing to ask them.
// It never fails and never downloads: it always exits 0 and prints exactly one line saying "built" or "skipped" and
// why. The full node-gyp output goes to build/native-build.log.
//
//   SAFETENSORS_NO_NATIVE=1   skip the build (the library then uses its pure JavaScript paths)
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { findNodeDir, findNodeGyp, isTruthy, missingTool, root } from "./native-tools.mjs";

const PREFIX = "safetensors-ts native addon:";
const addonPath = join(root, "build", "Release", "safetensors_native.node");
const logPath = join(root, "build", "native-build.log");
const POSIX = new Set(["linux", "darwin", "freebsd", "openbsd", "netbsd", "sunos", "aix"]);

function writeLog(text) {
  try {
    mkdirSync(dirname(logPath), { recursive: true });
    writeFileSync(logPath, text);
  } catch {
    // the log is a convenience only
  }
}

function lastMeaningfulLine(text) {
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !/^gyp (info|verb|sill)/.test(l));
  const error = lines.filter((l) => /error/i.test(l)).shift();
  return (error ?? lines.at(-1) ?? "").slice(0, 200);
}

/** The prebuilt binary the library's own loader picks and accepts here, if any: then there is nothing to build. */
async function fittingPrebuild() {
  const loader = join(root, "dist", "io", "native.js");
  if (!existsSync(loader)) return undefined; // a checkout before its first TypeScript build: build from source
  const { nativeStatus } = await import(pathToFileURL(loader).href);
  const status = nativeStatus();
  return status.available && status.origin === "prebuild" ? status.path : undefined;
}

async function build() {
  if (isTruthy(process.env.SAFETENSORS_NO_NATIVE)) return "skipped (SAFETENSORS_NO_NATIVE is set)";
  // `npm pack` and `npm publish` run "prepare" too: the package gets scripts/prebuild.mjs's binaries instead.
  if (["pack", "publish"].includes(process.env.npm_command ?? "")) return `skipped (npm ${process.env.npm_command})`;
  const prebuilt = await fittingPrebuild();
  if (prebuilt) return `skipped (the prebuilt ${relative(root, prebuilt)} fits this Node; nothing to build)`;
  if (!POSIX.has(process.platform)) return `skipped (platform ${process.platform} is not supported; POSIX only)`;
  if (!existsSync(join(root, "binding.gyp")) || !existsSync(join(root, "native", "safetensors_native.c"))) {
    return "skipped (native sources are not in this package)";
  }
  const gyp = findNodeGyp();
  if (!gyp) return "skipped (node-gyp not found)";
  const nodeDir = findNodeDir();
  if (!nodeDir.dir) return `skipped (${nodeDir.missing})`;
  const tool = missingTool();
  if (tool) return `skipped (${tool})`;

  const started = Date.now();
  const result = spawnSync(process.execPath, [gyp, "rebuild", "--release", `--nodedir=${nodeDir.dir}`], {
    cwd: root,
    encoding: "utf8",
    timeout: 600_000,
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, npm_config_nodedir: nodeDir.dir },
  });
  const output = `$ node ${gyp} rebuild --release --nodedir=${nodeDir.dir}\n${result.stdout ?? ""}${result.stderr ?? ""}`;
  writeLog(output);
  if (result.error) return `skipped (node-gyp could not run: ${result.error.message}; see build/native-build.log)`;
  if (result.status !== 0) {
    return `skipped (build failed: ${lastMeaningfulLine(output)}; see build/native-build.log)`;
  }
  if (!existsSync(addonPath)) return "skipped (node-gyp succeeded but produced no safetensors_native.node)";
  try {
    const addon = createRequire(import.meta.url)(addonPath);
    if (typeof addon.open !== "function") return "skipped (built, but the addon does not export open())";
  } catch (error) {
    return `skipped (built, but it does not load: ${String(error?.message ?? error).split("\n")[0]})`;
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  return `built build/Release/safetensors_native.node in ${seconds}s`;
}

let line;
try {
  line = await build();
} catch (error) {
  line = `skipped (unexpected error: ${String(error?.message ?? error).split("\n")[0]})`;
}
console.log(`${PREFIX} ${line}`);
process.exitCode = 0;
