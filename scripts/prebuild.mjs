#!/usr/bin/env node
// Builds the prebuilt binaries that ship inside the package, for Linux on x64 and arm64 (glibc), in the layout of
// node-gyp-build's tag rules that src/io/native-load.ts reads:
//
//   prebuilds/linux-<arch>/node.napi.glibc.node                      safetensors_native: Node-API only, every Node
//   prebuilds/linux-<arch>/safetensors_copy/node.napi.glibc.node     safetensors_copy: Node-API only, every Node
//   prebuilds/linux-<arch>/safetensors_v8/node.abi<N>.glibc.node     safetensors_v8 (native/unaccounted.cc): one per
//                                                                     Node ABI in NODE_BUILDS (scripts/node-builds.mjs)
//
// Run at pack time ("prepack"), so that a user whose npm runs no install scripts (the package has none) gets the
// native code on every tested Node. The compilers are called directly (no node-gyp, no make, no python): the sources
// are few and the flags are node-gyp's own for these targets. The headers come from the official Node builds on the
// npm registry (node-linux-<arch>@<version>, include/node), installed on demand into a cache by node-builds.mjs.
// arm64 is cross-compiled with Debian's gcc-aarch64-linux-gnu (on an arm64 host, x64 with gcc-x86-64-linux-gnu).
//
// A platform or Node whose compiler or headers are missing is skipped with one line saying so, except when packing for
// publication (`npm publish`, or --all): a published package must hold every binary. The host platform's Node-API
// binaries are always required: the package must not be packed without them.
//
//   node scripts/prebuild.mjs            build prebuilds/ (the "prepack" script)
//   node scripts/prebuild.mjs --all      the same, failing when any binary cannot be built
//   node scripts/prebuild.mjs --clean    remove prebuilds/ (the "postpack" script: a checkout keeps loading the
//                                        build/Release it builds, never a binary left over from an earlier pack)
//
//   SAFETENSORS_PREBUILD_CACHE=DIR       reuse a binary compiled earlier from the same inputs, as ccache does: the
//                                        key is the compiler's --version, every argument, and the content of every
//                                        file the compiler reads (its -M list: the sources, native/*.h, Node's and
//                                        the system's headers). Any change compiles again, and only binaries that
//                                        compiled go in. test/package.test.ts sets it: its pack built the 12 binaries
//                                        every run, 26 s of CPU of the file's 96 (2026-12-03, load 2-3 on 2 cores).
//                                        Entries unused for a week are removed. Never used for --all or publish.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
} from "node:fs";
import { availableParallelism } from "node:os";
import { join, relative } from "node:path";
import { findNodeDir, isTruthy, onPath, root } from "./native-tools.mjs";
import { NODE_BUILDS, nodeBuild } from "./node-builds.mjs";

const outDir = join(root, "prebuilds");
const started = Date.now();

/** binding.gyp's targets, as compiled here. */
const NAPI_TARGETS = [
  {
    name: "safetensors_native",
    folder: "",
    sources: ["safetensors_native.c", "common.c", "huge.c", "bridge.c", "header_scan.c", "owned.c", "journal.c"],
  },
  {
    name: "safetensors_copy",
    folder: "safetensors_copy",
    sources: ["copy.c", "copy_args.c", "direct_write.c", "gguf_q8.c", "merge_kernels.c", "merge_file.c", "map_guard.c"],
    // gguf_q8.c's and merge_kernels.c's float32 steps must not be fused into FMAs (bit-exact with gguf-py's
    // quantizer and with torch's arithmetic in mergekit).
    flags: ["-ffp-contract=off"],
  },
];
const V8_TARGET = { name: "safetensors_v8", folder: "safetensors_v8", sources: ["unaccounted.cc"] };

/** node-gyp's flags for these targets on Linux (its common.gypi and binding.gyp), plus -s to strip. */
const COMMON = ["-O2", "-fPIC", "-pthread", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Wno-unused-parameter"];
const DEFINES = ["-D_FILE_OFFSET_BITS=64", "-D_LARGEFILE_SOURCE", "-DNAPI_VERSION=8", "-DBUILDING_NODE_EXTENSION"];
const C_FLAGS = ["-std=gnu11"];
const CXX_FLAGS = ["-std=gnu++20", "-fno-rtti", "-fno-exceptions", "-DV8_DEPRECATION_WARNINGS=1"];
const LINK = ["-shared", "-pthread", "-s"];

const TRIPLES = { x64: "x86_64-linux-gnu", arm64: "aarch64-linux-gnu" };

const all = process.argv.includes("--all") || process.env.npm_command === "publish";

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
}

if (process.argv.includes("--clean")) {
  rmSync(outDir, { recursive: true, force: true });
  process.exit(0);
}

if (process.platform !== "linux") {
  fail(`prebuilt binaries are made on Linux only (this is ${process.platform}); build from source with node-gyp`);
}

/** The C and C++ compilers for `arch`: the host's own for its arch, `<triple>-gcc` for the other. */
function compilers(arch) {
  if (arch === process.arch) {
    const cc = onPath([process.env.CC ?? "cc", "cc", "gcc", "clang"]);
    const cxx = onPath([process.env.CXX ?? "c++", "c++", "g++", "clang++"]);
    return { cc, cxx, missing: !cc ? "no C compiler: cc, gcc or clang" : !cxx ? "no C++ compiler" : undefined };
  }
  const triple = TRIPLES[arch];
  const cc = onPath([`${triple}-gcc`]);
  const cxx = onPath([`${triple}-g++`]);
  const missing =
    !cc || !cxx ? `${triple}-gcc and ${triple}-g++ not found (Debian: gcc-${triple} g++-${triple})` : undefined;
  return { cc, cxx, missing };
}

/** Compiles and links one binary; resolves to an error message, or undefined. */
function compile(compiler, flags, sources, out) {
  mkdirSync(join(out, ".."), { recursive: true });
  const args = [...flags, ...sources.map((name) => join(root, "native", name)), ...LINK, "-o", out];
  return new Promise((done) => {
    const child = spawn(compiler, args, { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
    });
    child.on("error", (error) => done(`${compiler} failed for ${relative(root, out)}: ${error.message}`));
    child.on("close", (status) => {
      if (status !== 0 || !existsSync(out)) {
        const why = stderr.trim().split("\n").slice(0, 6).join("\n");
        return done(`${compiler} failed for ${relative(root, out)} (exit ${status}): ${why}`);
      }
      if (stderr.trim()) console.error(stderr.trim());
      done(undefined);
    });
  });
}

const cacheRoot = all ? undefined : process.env.SAFETENSORS_PREBUILD_CACHE || undefined;
/** An entry of the cache is removed after this long unused. */
const CACHE_DAYS = 7;

/** What `compiler` and the linker it calls say they are (once per compiler). */
const versions = new Map();
function compilerVersion(compiler) {
  if (!versions.has(compiler)) {
    const say = (program) => spawnSync(program, ["--version"], { encoding: "utf8" });
    const cc = say(compiler);
    const ld = spawnSync(compiler, ["-print-prog-name=ld"], { encoding: "utf8" });
    const linker = ld.status === 0 ? say(ld.stdout.trim()) : ld;
    versions.set(compiler, cc.status === 0 && linker.status === 0 ? cc.stdout + linker.stdout : undefined);
  }
  return versions.get(compiler);
}

/**
 * The cache key of one binary: the compiler's identity, its arguments (the checkout's path left out) and the content
 * of every file the preprocessor reads for them (`-M`: dependencies, system headers included). undefined when any of
 * that cannot be had: the binary is then compiled.
 */
function cacheKey(compiler, flags, sources) {
  const version = compilerVersion(compiler);
  if (version === undefined) return undefined;
  const paths = sources.map((name) => join(root, "native", name));
  const deps = spawnSync(compiler, [...flags, "-M", ...paths], { encoding: "utf8", maxBuffer: 64 << 20 });
  if (deps.status !== 0) return undefined;
  // make's rule syntax: "target.o: dep dep \\\n dep", one rule per source; a space in a path is "\\ ".
  const files = new Set();
  for (const rule of deps.stdout.replaceAll("\\\n", " ").split("\n")) {
    const colon = rule.indexOf(": ");
    if (colon < 0) continue;
    for (const file of rule.slice(colon + 2).split(/(?<!\\) +/)) if (file) files.add(file.replaceAll("\\ ", " "));
  }
  const hash = createHash("sha256");
  const here = (path) => (path.startsWith(`${root}/`) ? `<root>/${relative(root, path)}` : path);
  hash.update(JSON.stringify([compiler, version, flags.map(here), paths.map(here), LINK]));
  try {
    for (const file of [...files].sort()) hash.update(`\0${here(file)}\0`).update(readFileSync(file));
  } catch {
    return undefined;
  }
  return hash.digest("hex");
}

/** Compiles one binary, or copies it from the cache; resolves to an error message, or undefined. */
async function compileCached(compiler, flags, sources, out) {
  const key = cacheRoot === undefined ? undefined : cacheKey(compiler, flags, sources);
  if (key === undefined) return compile(compiler, flags, sources, out);
  const entry = join(cacheRoot, `${key}.node`);
  mkdirSync(join(out, ".."), { recursive: true });
  if (existsSync(entry)) {
    copyFileSync(entry, out);
    const now = new Date();
    utimesSync(entry, now, now);
    cached.push(out);
    return undefined;
  }
  const error = await compile(compiler, flags, sources, out);
  if (error === undefined) {
    mkdirSync(cacheRoot, { recursive: true });
    const partial = `${entry}.${process.pid}.tmp`;
    copyFileSync(out, partial);
    renameSync(partial, entry);
  }
  return error;
}

/** Removes the cache's entries unused for CACHE_DAYS. */
function pruneCache() {
  if (cacheRoot === undefined || !existsSync(cacheRoot)) return;
  const oldest = Date.now() - CACHE_DAYS * 86_400_000;
  for (const name of readdirSync(cacheRoot)) {
    const path = join(cacheRoot, name);
    if (statSync(path).mtimeMs < oldest) rmSync(path, { force: true });
  }
}

/** Runs `jobs` (functions returning promises), `width` at a time. */
async function pool(jobs, width) {
  const results = [];
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const index = next++;
      results[index] = await jobs[index]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, jobs.length) }, worker));
  return results;
}

/**
 * Headers of every Node line (the per-ABI addon needs each; the Node-API targets take any): the running Node's own
 * for its ABI when it has them, else the official build's from the cache, installed from the registry unless
 * SAFETENSORS_PREBUILD_OFFLINE is set (the package test sets it: it packs with what this machine has).
 */
const offline = isTruthy(process.env.SAFETENSORS_PREBUILD_OFFLINE);
const headers = new Map();
const skipped = [];
for (const build of NODE_BUILDS) {
  const local = build.abi === Number(process.versions.modules) ? findNodeDir() : {};
  if (local.dir) {
    headers.set(build.abi, join(local.dir, "include", "node"));
    continue;
  }
  // include/node is the same in the x64 and arm64 packages but for config.gypi, which no flag here reads.
  const got = nodeBuild(build.major, "x64", { install: !offline });
  if (got.missing) skipped.push(`safetensors_v8 for Node ${build.major} (ABI ${build.abi}): ${got.missing}`);
  else headers.set(build.abi, got.include);
}
const napiHeaders = [...headers.values()][0];
if (!napiHeaders) fail(`no Node headers: ${skipped.join("; ")}`);

rmSync(outDir, { recursive: true, force: true });
const jobs = [];
const built = [];
/** The binaries copied from SAFETENSORS_PREBUILD_CACHE. */
const cached = [];
for (const arch of ["x64", "arm64"]) {
  const tools = compilers(arch);
  const dir = join(outDir, `linux-${arch}`);
  if (tools.missing) {
    if (arch === process.arch) fail(tools.missing);
    skipped.push(`linux-${arch}: ${tools.missing}`);
    continue;
  }
  for (const target of NAPI_TARGETS) {
    const out = join(dir, target.folder, "node.napi.glibc.node");
    const flags = [...COMMON, ...DEFINES, ...C_FLAGS, ...(target.flags ?? []), "-isystem", napiHeaders];
    jobs.push(() => compileCached(tools.cc, flags, target.sources, out));
    built.push(out);
  }
  for (const [abi, include] of headers) {
    const out = join(dir, V8_TARGET.folder, `node.abi${abi}.glibc.node`);
    const flags = [...COMMON, ...DEFINES, ...CXX_FLAGS, "-isystem", include];
    jobs.push(() => compileCached(tools.cxx, flags, V8_TARGET.sources, out));
    built.push(out);
  }
}
const errors = (await pool(jobs, availableParallelism())).filter(Boolean);
if (errors.length > 0) fail(errors.join("\n"));

const seconds = ((Date.now() - started) / 1000).toFixed(1);
const bytes = built.reduce((sum, path) => sum + statSync(path).size, 0);
const reused = cached.length > 0 ? `, ${cached.length} of them from ${cacheRoot}` : "";
console.log(`prebuild: built ${built.length} binaries (${(bytes / 1024).toFixed(0)} KiB) in ${seconds}s${reused}`);
pruneCache();
for (const line of skipped) console.log(`prebuild: SKIPPED ${line}`);
if (all && skipped.length > 0) fail("a package for publication needs every binary (see SKIPPED above)");
