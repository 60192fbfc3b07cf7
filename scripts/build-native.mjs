#!/usr/bin/env node
// Builds the optional native addon (native/safetensors_native.c) into build/Release/safetensors_native.node.
//
// Run by `npm install` (the package's "install" script). It must never fail the install and never download:
// it always exits 0 and prints exactly one line saying "built" or "skipped" and why. The full node-gyp output
// goes to build/native-build.log.
//
//   SAFETENSORS_NO_NATIVE=1   skip the build (the library then uses its pure JavaScript paths)
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const PREFIX = "safetensors-ts native addon:";
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const addonPath = join(root, "build", "Release", "safetensors_native.node");
const logPath = join(root, "build", "native-build.log");
const POSIX = new Set(["linux", "darwin", "freebsd", "openbsd", "netbsd", "sunos", "aix"]);

function isTruthy(value) {
  return value !== undefined && /^(1|true|yes|on)$/i.test(value.trim());
}

function onPath(names) {
  const dirs = (process.env.PATH ?? "").split(delimiter).filter(Boolean);
  for (const name of names) {
    if (name.includes("/")) {
      if (existsSync(name)) return name;
      continue;
    }
    for (const dir of dirs) {
      const candidate = join(dir, name);
      if (existsSync(candidate)) return candidate;
    }
  }
  return undefined;
}

/** node-gyp's entry point, without installing or downloading anything. */
function findNodeGyp() {
  const candidates = [];
  if (process.env.npm_config_node_gyp) candidates.push(process.env.npm_config_node_gyp);
  try {
    candidates.push(createRequire(join(root, "package.json")).resolve("node-gyp/bin/node-gyp.js"));
  } catch {
    // not a local dependency: fine
  }
  if (process.env.npm_execpath) {
    // npm_execpath is npm's own bin/npm-cli.js: node-gyp ships inside npm.
    candidates.push(resolve(dirname(process.env.npm_execpath), "..", "node_modules", "node-gyp", "bin", "node-gyp.js"));
  }
  const prefix = resolve(dirname(process.execPath), "..");
  candidates.push(join(prefix, "lib", "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js"));
  candidates.push(join(prefix, "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js"));
  const found = candidates.find((c) => existsSync(c));
  if (found) return found;
  // Last resort: ask npm where its global modules live (local command, no network).
  const npm = onPath(["npm"]);
  if (npm) {
    const r = spawnSync(npm, ["root", "-g"], { encoding: "utf8", timeout: 30_000 });
    const globalRoot = r.status === 0 ? r.stdout.trim() : "";
    const candidate = join(globalRoot, "npm", "node_modules", "node-gyp", "bin", "node-gyp.js");
    if (globalRoot && existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** A directory holding Node's headers (include/node/node_api.h), so node-gyp needs no download. */
function findNodeDir() {
  const hasHeaders = (dir) => existsSync(join(dir, "include", "node", "node_api.h"));
  const configured = process.env.npm_config_nodedir;
  if (configured && hasHeaders(configured)) return { dir: configured };
  const prefix = resolve(dirname(process.execPath), "..");
  if (hasHeaders(prefix)) return { dir: prefix };
  // Headers node-gyp fetched earlier into its cache count too: with them present it does not download.
  const version = process.version.slice(1);
  const caches = [
    process.env.npm_config_devdir,
    process.env.XDG_CACHE_HOME && join(process.env.XDG_CACHE_HOME, "node-gyp"),
    join(homedir(), ".cache", "node-gyp"),
    join(homedir(), "Library", "Caches", "node-gyp"),
  ].filter(Boolean);
  for (const cache of caches) {
    const dir = join(cache, version);
    if (hasHeaders(dir) && existsSync(join(dir, "installVersion"))) return { dir };
  }
  const where = configured ? ` (npm's nodedir=${configured} has none)` : "";
  return { missing: `no local Node headers (include/node/node_api.h)${where}; node-gyp would have to download them` };
}

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

function build() {
  if (isTruthy(process.env.SAFETENSORS_NO_NATIVE)) return "skipped (SAFETENSORS_NO_NATIVE is set)";
  if (!POSIX.has(process.platform)) return `skipped (platform ${process.platform} is not supported; POSIX only)`;
  if (!existsSync(join(root, "binding.gyp")) || !existsSync(join(root, "native", "safetensors_native.c"))) {
    return "skipped (native sources are not in this package)";
  }
  const gyp = findNodeGyp();
  if (!gyp) return "skipped (node-gyp not found)";
  const nodeDir = findNodeDir();
  if (!nodeDir.dir) return `skipped (${nodeDir.missing})`;
  const cc = onPath([process.env.CC ?? "cc", "cc", "gcc", "clang"]);
  if (!cc) return "skipped (no C compiler: cc, gcc or clang)";
  if (!onPath(["make", "gmake"])) return "skipped (make not found)";
  if (!onPath([process.env.npm_config_python ?? process.env.PYTHON ?? "python3", "python3", "python"])) {
    return "skipped (python3 not found; node-gyp needs it)";
  }

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
  line = build();
} catch (error) {
  line = `skipped (unexpected error: ${String(error?.message ?? error).split("\n")[0]})`;
}
console.log(`${PREFIX} ${line}`);
process.exitCode = 0;
