#!/usr/bin/env node
// The official Node builds the package is built and tested against, from the npm registry's node-linux-<arch>
// packages (bin/node and include/node, the headers an addon compiles with). Kept in a cache outside the repository
// ($SAFETENSORS_NODE_BUILDS, else $XDG_CACHE_HOME/safetensors-ts/node-builds, else ~/.cache/...), installed on demand
// with npm (so npm's own cache serves a second machine's copy). Used by scripts/prebuild.mjs (the headers of every
// Node the per-ABI addon is built for), .ci/run and the bench (`--node`).
//
//   node scripts/node-builds.mjs install [x64|arm64|all] [MAJOR...]   install, print "major arch path/bin/node" lines
//   node scripts/node-builds.mjs list                                  the same for those already installed
//   node scripts/node-builds.mjs runtimes                              install Bun and Deno (RUNTIMES), print their paths
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

/**
 * The Node versions tested and prebuilt for, newest patch of each line when this was written, with their ABI
 * (`process.versions.modules`, the tag of the per-ABI addon). engines in package.json names the same lines.
 */
export const NODE_BUILDS = [
  { major: 20, version: "20.20.2", abi: 115 },
  { major: 22, version: "22.23.5", abi: 127 },
  { major: 24, version: "24.22.3", abi: 137 },
  { major: 26, version: "26.12.1", abi: 147 },
];

export const ARCHES = ["x64", "arm64"];

/** Other runtimes the package is tested on, from their npm packages (binaries for the host platform). */
export const RUNTIMES = [
  { name: "bun", version: "1.4.4" },
  { name: "deno", version: "2.9.6" },
];

export function cacheDir() {
  if (process.env.SAFETENSORS_NODE_BUILDS) return process.env.SAFETENSORS_NODE_BUILDS;
  const base = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return join(base, "safetensors-ts", "node-builds");
}

/** Where the build of `major` for `arch` is (installed or not): its folder, bin/node and include/node. */
export function nodeBuildPaths(major, arch) {
  const build = NODE_BUILDS.find((b) => b.major === Number(major));
  if (!build) throw new Error(`no Node ${major} in NODE_BUILDS (${NODE_BUILDS.map((b) => b.major).join(", ")})`);
  const dir = join(cacheDir(), `node-linux-${arch}-${build.version}`, "node_modules", `node-linux-${arch}`);
  return { ...build, arch, dir, bin: join(dir, "bin", "node"), include: join(dir, "include", "node") };
}

/**
 * The build of `major` for `arch`, installed from the registry when missing (`install`), or why it is not there.
 * npm's output goes to `log` (a function), never to stdout.
 */
export function nodeBuild(major, arch, { install = true, log = () => {} } = {}) {
  const paths = nodeBuildPaths(major, arch);
  if (existsSync(join(paths.include, "node_api.h")) && existsSync(paths.bin)) return paths;
  if (!install) return { ...paths, missing: `node-linux-${arch}@${paths.version} is not installed in ${cacheDir()}` };
  const prefix = join(paths.dir, "..", "..");
  mkdirSync(prefix, { recursive: true });
  writeFileSync(join(prefix, "package.json"), '{"private":true}\n');
  // --force: the package declares os/cpu, and an arm64 build is installed on x64 to cross-compile and to run under
  // qemu. It has no install scripts.
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const args = ["install", "--prefix", prefix, "--no-save", "--no-audit", "--no-fund", "--ignore-scripts", "--force"];
  const r = spawnSync(npm, [...args, `node-linux-${arch}@${paths.version}`], { encoding: "utf8", timeout: 600_000 });
  log(`${r.stdout ?? ""}${r.stderr ?? ""}`);
  if (r.status !== 0 || !existsSync(join(paths.include, "node_api.h"))) {
    const why = `${r.error?.message ?? ""}${r.stderr ?? ""}`.trim().split("\n").slice(-3).join("; ");
    return { ...paths, missing: `npm could not install node-linux-${arch}@${paths.version}: ${why}` };
  }
  return paths;
}

/** The binary of runtime `name` (RUNTIMES) in the cache, installed from the registry when missing (`install`). */
export function runtimeBin(name, { install = false, log = () => {} } = {}) {
  const runtime = RUNTIMES.find((r) => r.name === name);
  if (!runtime) throw new Error(`no runtime ${name} in RUNTIMES`);
  const prefix = join(cacheDir(), `${name}-${runtime.version}`);
  const bin = join(prefix, "node_modules", ".bin", name);
  const works = () => spawnSync(bin, ["--version"], { encoding: "utf8", timeout: 60_000 }).status === 0;
  if (existsSync(bin) && works()) return { ...runtime, bin };
  if (!install) return { ...runtime, bin, missing: `${name}@${runtime.version} is not installed in ${cacheDir()}` };
  mkdirSync(prefix, { recursive: true });
  writeFileSync(join(prefix, "package.json"), '{"private":true}\n');
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  // Their install scripts only pick the binary of this platform, which their optional dependencies also carry.
  const args = ["install", "--prefix", prefix, "--no-save", "--no-audit", "--no-fund", `${name}@${runtime.version}`];
  const r = spawnSync(npm, args, { encoding: "utf8", timeout: 600_000 });
  log(`${r.stdout ?? ""}${r.stderr ?? ""}`);
  if (r.status !== 0 || !existsSync(bin) || !works()) {
    const why = `${r.error?.message ?? ""}${r.stderr ?? ""}`.trim().split("\n").slice(-3).join("; ");
    return { ...runtime, bin, missing: `npm could not install ${name}@${runtime.version}: ${why}` };
  }
  return { ...runtime, bin };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const [command, archArg = "all", ...majors] = process.argv.slice(2);
  if (command === "runtimes") {
    let failed = false;
    for (const { name } of RUNTIMES) {
      const got = runtimeBin(name, { install: true, log: (text) => process.stderr.write(text) });
      if (got.missing) {
        console.error(got.missing);
        failed = true;
      } else console.log(`${name} ${got.version} ${got.bin}`);
    }
    process.exit(failed ? 1 : 0);
  }
  if (command !== "install" && command !== "list") {
    console.error("usage: node scripts/node-builds.mjs install|list [x64|arm64|all] [MAJOR...] | runtimes");
    process.exit(2);
  }
  const arches = archArg === "all" ? ARCHES : [archArg];
  const wanted = majors.length > 0 ? majors.map(Number) : NODE_BUILDS.map((b) => b.major);
  let failed = false;
  for (const arch of arches) {
    for (const major of wanted) {
      const build = nodeBuild(major, arch, {
        install: command === "install",
        log: (text) => process.stderr.write(text),
      });
      if (build.missing) {
        console.error(build.missing);
        failed = true;
      } else console.log(`${major} ${arch} ${build.bin}`);
    }
  }
  process.exitCode = failed ? 1 : 0;
}
