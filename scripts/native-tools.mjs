// Finding the tools a native build needs, without installing or downloading anything. Shared by
// scripts/build-native.mjs (the install step) and scripts/prebuild.mjs (the pack step).
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The package root (this file is scripts/native-tools.mjs). */
export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

export function isTruthy(value) {
  return value !== undefined && /^(1|true|yes|on)$/i.test(value.trim());
}

export function onPath(names) {
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
export function findNodeGyp() {
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
export function findNodeDir() {
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

/** The first build tool node-gyp needs here that is missing (C and, for C++ sources, C++ compiler, make, python3). */
export function missingTool() {
  if (!onPath([process.env.CC ?? "cc", "cc", "gcc", "clang"])) return "no C compiler: cc, gcc or clang";
  const cplusplus = readdirSync(join(root, "native")).some((name) => /\.(cc|cpp)$/.test(name));
  if (cplusplus && !onPath([process.env.CXX ?? "c++", "c++", "g++", "clang++"])) {
    return "no C++ compiler: c++, g++ or clang++";
  }
  if (!onPath(["make", "gmake"])) return "make not found";
  if (!onPath([process.env.npm_config_python ?? process.env.PYTHON ?? "python3", "python3", "python"])) {
    return "python3 not found; node-gyp needs it";
  }
  return undefined;
}
