/**
 * Finding and loading the optional native addon, best first:
 *
 * 1. a prebuilt binary shipped in the package (`prebuilds/<platform>-<arch>/node.napi.glibc.node`, made by
 *    scripts/prebuild.mjs at pack time), chosen with node-gyp-build's tag rules for this runtime, ABI and libc;
 * 2. the binary built from source (`build/Release/safetensors_native.node`, `scripts/build-native.mjs`: a checkout's
 *    `npm install`, or run by hand where no prebuilt binary fits);
 * 3. none: the library uses its pure JavaScript paths.
 *
 * Other targets of binding.gyp follow the same order, their prebuilds in a folder of their name:
 * `prebuilds/<platform>-<arch>/<target>/node.<tag>.glibc.node` (scripts/prebuild.mjs).
 *
 * The main addon and the copy addon use Node-API only: one binary (tagged `napi`) fits every Node version. The small
 * safetensors_v8 uses V8's C++ API, so each of its binaries fits one Node ABI (`process.versions.modules`, tagged
 * `abi<N>`). A candidate that does not load, or lacks any member the code uses (a stale build from an older version),
 * is skipped with its reason, and the next one is tried; loading never throws.
 */
import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

export type AddonOrigin = "prebuild" | "build";

export interface AddonCandidate {
  readonly origin: AddonOrigin;
  readonly path: string;
}

/** The `typeof` each member of the addon must have, by name. */
export type AddonShape = Readonly<Record<string, "function" | "number" | "boolean" | "object" | "string">>;

export interface AddonLoad<T> {
  readonly addon: T | null;
  /** The candidate that loaded. */
  readonly loaded?: AddonCandidate;
  /** Why each candidate tried before (or instead of) it was not used. */
  readonly rejected: readonly string[];
}

/**
 * node-gyp-build's tag rules (4.8.4, `parseTuple` ... `compareTags`), for the prebuilds scripts/prebuild.mjs names:
 * written here rather than loaded from the package, because loading it (two CommonJS files, node:os, a resolution
 * through node_modules) was a fifth of what importing the Node entry cost. Measured 2026-12-02, Node 20.20.2, 21
 * fresh processes, load ~4, `await import()` in the process: an empty module 5.6 ms, node-gyp-build required 8.5 ms.
 * test/package-loader.test.ts checks the rules it applies.
 */
interface Tuple {
  readonly name: string;
  readonly platform: string;
  readonly architectures: readonly string[];
}

/** A folder of prebuilds/: `<platform>-<arch>[+<arch>...]`. */
function parseTuple(name: string): Tuple | undefined {
  const parts = name.split("-");
  if (parts.length !== 2) return undefined;
  const [platform, archs] = parts as [string, string];
  const architectures = archs.split("+");
  if (!platform || !architectures.every(Boolean)) return undefined;
  return { name, platform, architectures };
}

interface Tags {
  readonly file: string;
  specificity: number;
  runtime?: string;
  napi?: boolean;
  abi?: string;
  uv?: string;
  armv?: string;
  libc?: string;
}

/** A binary's name: dot-separated tags ending in `.node` (`node.napi.glibc.node`, `node.abi115.glibc.node`). */
function parseTags(file: string): Tags | undefined {
  const parts = file.split(".");
  if (parts.pop() !== "node") return undefined;
  const tags: Tags = { file, specificity: 0 };
  for (const tag of parts) {
    if (tag === "node" || tag === "electron" || tag === "node-webkit") tags.runtime = tag;
    else if (tag === "napi") tags.napi = true;
    else if (tag.startsWith("abi")) tags.abi = tag.slice(3);
    else if (tag.startsWith("uv")) tags.uv = tag.slice(2);
    else if (tag.startsWith("armv")) tags.armv = tag.slice(4);
    else if (tag === "glibc" || tag === "musl") tags.libc = tag;
    else continue;
    tags.specificity++;
  }
  return tags;
}

/** What this process is, as node-gyp-build reads it. */
interface Host {
  readonly runtime: string;
  readonly abi: string | undefined;
  readonly uv: string;
  readonly armv: string;
  readonly libc: string;
}

function hostOf(platform: string, arch: string): Host {
  const variables = (process.config as { variables?: { arm_version?: string } } | undefined)?.variables ?? {};
  return {
    runtime: process.versions.electron ? "electron" : "node",
    abi: process.versions.modules,
    uv: (process.versions.uv ?? "").split(".")[0] ?? "",
    armv: process.env.ARM_VERSION || (arch === "arm64" ? "8" : variables.arm_version) || "",
    libc: process.env.LIBC || (platform === "linux" && existsSync("/etc/alpine-release") ? "musl" : "glibc"),
  };
}

function matchTags(host: Host, tags: Tags): boolean {
  const agnostic = tags.runtime === "node" && tags.napi === true;
  if (tags.runtime && tags.runtime !== host.runtime && !agnostic) return false;
  if (tags.abi && tags.abi !== host.abi && !tags.napi) return false;
  if (tags.uv && tags.uv !== host.uv) return false;
  if (tags.armv && tags.armv !== host.armv) return false;
  if (tags.libc && tags.libc !== host.libc) return false;
  return true;
}

/** Precedence: the runtime's own binary, then a per-ABI one over Node-API, then the more specific. */
function compareTags(runtime: string): (a: Tags, b: Tags) => number {
  return (a, b) => {
    if (a.runtime !== b.runtime) return a.runtime === runtime ? -1 : 1;
    if (a.abi !== b.abi) return a.abi ? -1 : 1;
    if (a.specificity !== b.specificity) return a.specificity > b.specificity ? -1 : 1;
    return 0;
  };
}

const requireHere = createRequire(import.meta.url);

/**
 * Why the addons cannot serve this runtime, or undefined. Deno loads them (its Node-API works), but the descriptors
 * its node:fs hands out are Deno's resource ids, not the operating system's: the addons open, read and map files by
 * OS descriptor, and a descriptor of one side is EBADF or another file on the other. Bun's are the OS's.
 */
export function runtimeRefusal(): string | undefined {
  const versions = process.versions as Record<string, string | undefined>;
  if (versions.deno !== undefined || "Deno" in globalThis) {
    return `Deno ${versions.deno ?? ""}: its node:fs descriptors are not the OS's, which the addon reads and maps`;
  }
  return undefined;
}

function messageOf(error: unknown): string {
  return String((error as { message?: unknown } | null)?.message ?? error).split("\n")[0] ?? "";
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** The binding.gyp target of the main addon; its prebuilds sit in the platform folder itself. */
export const MAIN_TARGET = "safetensors_native";
/** The per-ABI target that makes windows V8 does not count (native/unaccounted.cc). */
export const UNCOUNTED_TARGET = "safetensors_v8";

/**
 * The prebuilt binary of `target` under `root/prebuilds` that node-gyp-build would pick for this process (the same
 * tuple and tag precedence as its `resolve`, without its preference for build/Release), or why there is none.
 */
export function findPrebuild(root: string, target = MAIN_TARGET): { path: string } | { missing: string } {
  const { platform, arch } = process;
  const host = hostOf(platform, arch);
  const dir = join(root, "prebuilds");
  const tuple = listDir(dir)
    .map(parseTuple)
    .filter((t): t is Tuple => t !== undefined && t.platform === platform && t.architectures.includes(arch))
    // Single-arch folders before multi-arch ones.
    .sort((a, b) => a.architectures.length - b.architectures.length)[0];
  const wanted = `${platform}-${arch}, ${host.runtime} ABI ${host.abi}`;
  if (!tuple) return { missing: `no prebuilt binary for ${wanted} in ${dir}` };
  const folder = target === MAIN_TARGET ? join(dir, tuple.name) : join(dir, tuple.name, target);
  const winner = listDir(folder)
    .map(parseTags)
    .filter((tags): tags is Tags => tags !== undefined && matchTags(host, tags))
    .sort(compareTags(host.runtime))[0];
  if (!winner) return { missing: `no prebuilt binary for ${wanted} in ${folder}` };
  return { path: join(folder, winner.file) };
}

/** Where `target` may be under the package root `root`, best first, and why the prebuilt one is absent if it is. */
export function addonCandidates(
  root: string,
  target = MAIN_TARGET,
): { candidates: AddonCandidate[]; rejected: string[] } {
  const candidates: AddonCandidate[] = [];
  const rejected: string[] = [];
  const prebuild = findPrebuild(root, target);
  if ("path" in prebuild) candidates.push({ origin: "prebuild", path: prebuild.path });
  else rejected.push(prebuild.missing);
  candidates.push({ origin: "build", path: join(root, "build", "Release", `${target}.node`) });
  return { candidates, rejected };
}

/**
 * What is wrong with a loaded module: the members of `shape` it lacks or has with another type, and the numbers of
 * `versions` it has with another value (an addon whose functions kept their names but changed their arguments); ""
 * if none.
 */
function shapeProblem(module: unknown, shape: AddonShape, versions: Readonly<Record<string, number>>): string {
  if (typeof module !== "object" || module === null) return `exports ${typeof module}, not an object`;
  const record = module as Record<string, unknown>;
  const missing: string[] = [];
  const mistyped: string[] = [];
  for (const [name, kind] of Object.entries(shape)) {
    const actual = typeof record[name];
    if (actual === "undefined") missing.push(name);
    else if (actual !== kind) mistyped.push(`${name} is a ${actual}, not a ${kind}`);
  }
  for (const [name, wanted] of Object.entries(versions)) {
    const actual = record[name];
    if (typeof actual === "number" && actual !== wanted) mistyped.push(`${name} is ${actual}, not ${wanted}`);
  }
  const parts = [];
  if (missing.length > 0) parts.push(`lacks ${missing.join(", ")}`);
  if (mistyped.length > 0) parts.push(mistyped.join(", "));
  return parts.length > 0 ? `${parts.join("; ")} (stale or partial build)` : "";
}

/** Binaries loaded by this module, by path: a second process.dlopen of one would register it again. */
const loaded = new Map<string, unknown>();

/**
 * A `.node` file through `process.dlopen`, what `require()` does for one, without CommonJS's resolution, caching
 * and wrapping around it: measured 2026-12-02 (Node 20.20.2, 21 fresh processes, load ~4, `await import()` in the
 * process), the main addon required 3.1 ms over an empty module, through process.dlopen 1.1 ms. Anything else (the
 * tests' fake addons) is required.
 */
function loadModule(path: string): unknown {
  if (!path.endsWith(".node")) return requireHere(path);
  if (loaded.has(path)) return loaded.get(path);
  if (!existsSync(path)) throw Object.assign(new Error(`Cannot find module '${path}'`), { code: "MODULE_NOT_FOUND" });
  const module = { exports: {} as unknown };
  process.dlopen(module, path);
  loaded.set(path, module.exports);
  return module.exports;
}

/** Load the first candidate that loads, has every member of `shape` and the `versions` asked for. Never throws. */
export function loadFirst<T>(
  candidates: readonly AddonCandidate[],
  shape: AddonShape,
  versions: Readonly<Record<string, number>> = {},
): AddonLoad<T> {
  const rejected: string[] = [];
  for (const candidate of candidates) {
    let module: unknown;
    try {
      module = loadModule(candidate.path);
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      rejected.push(
        code === "MODULE_NOT_FOUND"
          ? `${candidate.path}: not built (run \`node scripts/build-native.mjs\` in the package; needs a C/C++ compiler, make and python3)`
          : `${candidate.path}: cannot load: ${messageOf(error)}`,
      );
      continue;
    }
    const problem = shapeProblem(module, shape, versions);
    if (problem) {
      rejected.push(`${candidate.path}: ${problem}`);
      continue;
    }
    return { addon: module as T, loaded: candidate, rejected };
  }
  return { addon: null, rejected };
}
