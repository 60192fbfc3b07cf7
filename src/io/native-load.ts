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
import { readdirSync } from "node:fs";
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

/** The tag helpers of node-gyp-build (it ships no types). */
interface PrebuildTags {
  parseTuple(name: string): { name: string } | undefined;
  matchTuple(platform: string, arch: string): (tuple: unknown) => boolean;
  compareTuples(a: unknown, b: unknown): number;
  parseTags(file: string): { file: string } | undefined;
  matchTags(runtime: string, abi: string): (tags: unknown) => boolean;
  compareTags(runtime: string): (a: unknown, b: unknown) => number;
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

function prebuildTags(): PrebuildTags | string {
  let module: Partial<PrebuildTags>;
  try {
    module = requireHere("node-gyp-build") as Partial<PrebuildTags>;
  } catch (error) {
    return `node-gyp-build is not installed (${messageOf(error)})`;
  }
  const names = ["parseTuple", "matchTuple", "compareTuples", "parseTags", "matchTags", "compareTags"] as const;
  if (names.some((name) => typeof module[name] !== "function")) return "node-gyp-build has no tag matcher";
  return module as PrebuildTags;
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
  const tags = prebuildTags();
  if (typeof tags === "string") return { missing: tags };
  const { platform, arch } = process;
  const runtime = process.versions.electron ? "electron" : "node";
  const abi = process.versions.modules;
  const dir = join(root, "prebuilds");
  const tuple = listDir(dir)
    .map((name) => tags.parseTuple(name))
    .filter(tags.matchTuple(platform, arch))
    .sort(tags.compareTuples)[0];
  const wanted = `${platform}-${arch}, ${runtime} ABI ${abi}`;
  if (!tuple) return { missing: `no prebuilt binary for ${wanted} in ${dir}` };
  const folder = target === MAIN_TARGET ? join(dir, tuple.name) : join(dir, tuple.name, target);
  const winner = listDir(folder)
    .map((file) => tags.parseTags(file))
    .filter(tags.matchTags(runtime, abi))
    .sort(tags.compareTags(runtime))[0];
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
      module = requireHere(candidate.path);
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
