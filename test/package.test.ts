/**
 * The package as a user gets it. SLOW for this suite (~20-40 s): packs the package (`npm pack`, which builds dist/
 * and the prebuilt addon), installs the tarball into scratch projects (with and without install scripts), typechecks
 * and runs the README's library example there under NodeNext and Bundler resolution, checks the published types under
 * `lib: ["ES2022", "DOM"]` with `skipLibCheck: false`, bundles the core for the browser with esbuild, and checks which
 * addon each install gets.
 *
 * The pack runs in a copy of the package's files (so it never rebuilds this checkout's build/ or dist/ under other
 * tests). The installs take the package's dependencies from npm's cache when it has them and from the registry
 * otherwise, as a user's install does. All of that happens before any test is defined, so that a reason to skip
 * (npm missing, the registry not answering and the cache cold, the addon's build tools missing at pack time) skips
 * the whole suite visibly, with the reason, and no hook runs that could fail on a half-made setup.
 */
import assert from "node:assert/strict";
import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { after, describe, test } from "node:test";
import { runInNewContext } from "node:vm";
import { saveFile, Tensor } from "../src/node.js";
import { repoRoot } from "./helpers/reference.js";

const TSC = join(repoRoot, "node_modules", "typescript", "bin", "tsc");
const TSC_PROJECTS = join(repoRoot, "test", "helpers", "tsc-projects.mjs");
/**
 * The Node that runs tsc: this one, or SAFETENSORS_TSC_NODE (scripts/node-matrix.mjs sets the host's under arm64
 * emulation, where one tsc run took minutes; type checking does not depend on the CPU).
 */
const TSC_NODE = process.env.SAFETENSORS_TSC_NODE || process.execPath;
/** Where the pack keeps the binaries it compiled, for the next run (unless SAFETENSORS_PREBUILD_CACHE says). */
const PREBUILD_CACHE = join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "safetensors-ts", "prebuilds");
const PACKAGE_FILES = [
  "package.json",
  "README.md",
  "CHANGELOG.md",
  "tsconfig.json",
  "tsconfig.build.json",
  "binding.gyp",
  "src",
  "bin",
  "native",
  "scripts",
  "inspector",
];

function run(cmd: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = {}): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, {
    cwd,
    encoding: "utf8",
    timeout: 300_000,
    env: { ...process.env, npm_config_update_notifier: "false", ...env },
  });
}

function output(r: SpawnSyncReturns<string>): string {
  return `${r.error ? `${r.error.message}\n` : ""}${r.stdout ?? ""}${r.stderr ?? ""}`;
}

function ok(r: SpawnSyncReturns<string>, what: string): string {
  assert.equal(r.status, 0, `${what} failed (exit ${r.status}):\n${output(r)}`);
  return r.stdout;
}

const npmMissing = run("npm", ["--version"], repoRoot).status !== 0 ? "npm is not on PATH" : undefined;
const tscMissing = existsSync(TSC) ? undefined : `typescript is not installed at ${TSC} (run npm ci)`;
let skipReason: string | undefined = npmMissing ?? tscMissing;
if (skipReason) console.error(`\n!!! packed-package tests are SKIPPED: ${skipReason} !!!\n`);

const work = mkdtempSync(join(tmpdir(), "st-package-"));
after(() => rmSync(work, { recursive: true, force: true }));

let tarball = "";
let packed: string[] = [];
/** Scratch projects: the tarball installed with install scripts, and with --ignore-scripts. */
const withScripts = join(work, "app-scripts");
const noScripts = join(work, "app-noscripts");
let installLog = "";

function scratchProject(dir: string): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }, null, 2));
}

/** What npm prints when neither its cache nor the registry can give it a package. */
const UNREACHABLE =
  /\b(ENOTCACHED|ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|ERR_SOCKET_TIMEOUT)\b|request to \S+ failed/;

/**
 * npm install of the tarball: the dependencies from npm's cache when it holds them, else from the registry (one try,
 * not npm's minute of retries). Returns undefined, or a skip reason when neither can give a dependency.
 */
function install(dir: string, extra: readonly string[]): string | undefined {
  scratchProject(dir);
  const flags = ["--prefer-offline", "--fetch-retries=0", "--fetch-timeout=30000", "--no-audit", "--no-fund"];
  const r = run("npm", ["install", ...flags, ...extra, tarball], dir);
  if (r.status !== 0 && UNREACHABLE.test(output(r))) {
    const registry = run("npm", ["config", "get", "registry"], dir).stdout.trim();
    const why = output(r)
      .split("\n")
      .filter((line) => /npm error (code|.*request to)/.test(line))
      .join("; ");
    return `installing the tarball needs its dependencies, and neither npm's cache nor the registry (${registry}) gave them (${why})`;
  }
  installLog = `${installLog}${output(r)}`;
  ok(r, `npm install ${extra.join(" ")} of the tarball`);
  return undefined;
}

/** Packs the package and installs the tarball twice; returns a reason to skip, or undefined when all is ready. */
function prepare(): string | undefined {
  const given = process.env.SAFETENSORS_PACKED_TARBALL;
  if (given) {
    // scripts/node-matrix.mjs packs once and runs this file on every Node build.
    cpSync(given, join(work, basename(given)));
  } else {
    // A copy of what `npm pack` reads, with this checkout's node_modules (TypeScript, esbuild) linked in.
    const stage = join(work, "stage");
    mkdirSync(stage);
    for (const name of PACKAGE_FILES) cpSync(join(repoRoot, name), join(stage, name), { recursive: true });
    cpSync(join(repoRoot, "node_modules"), join(stage, "node_modules"), { recursive: true, verbatimSymlinks: true });
    // The per-ABI binaries of the other Node versions are built when their headers are in the cache (.ci/run puts
    // them there), never downloaded here. A binary compiled by an earlier run from the same sources, headers and
    // compiler is reused (scripts/prebuild.mjs, SAFETENSORS_PREBUILD_CACHE): a change to any of them compiles again.
    const pack = run("npm", ["pack", "--offline", "--pack-destination", work], stage, {
      SAFETENSORS_PREBUILD_OFFLINE: "1",
      SAFETENSORS_PREBUILD_CACHE: process.env.SAFETENSORS_PREBUILD_CACHE || PREBUILD_CACHE,
    });
    // Without the tools to compile the addon the package cannot be packed (prepack refuses to ship without it).
    const toolMissing =
      /^prebuild: ((no C\+* compiler|no Node headers|prebuilt binaries are made on Linux only).*)$/m.exec(output(pack));
    if (pack.status !== 0 && toolMissing) return `npm pack cannot build the prebuilt addon here: ${toolMissing[1]}`;
    ok(pack, "npm pack");
  }
  const found = readdirSync(work).filter((name) => name.endsWith(".tgz"));
  assert.equal(found.length, 1, `npm pack made ${found.join(", ")}`);
  tarball = join(work, found[0]!);
  packed = ok(run("tar", ["tzf", tarball], work), "tar tzf")
    .split("\n")
    .filter(Boolean)
    .map((name) => name.replace(/^package\//, ""));
  const cannotInstall = install(noScripts, ["--ignore-scripts"]) ?? install(withScripts, ["--foreground-scripts"]);
  if (cannotInstall) return cannotInstall;
  // A small model for the README example: the tensor names it uses, a 2-D embedding it slices.
  for (const dir of [noScripts, withScripts]) {
    const values = Array.from({ length: 64 * 256 }, (_, i) => (i % 97) / 8);
    saveFile(
      join(dir, "model.safetensors"),
      {
        "lm_head.weight": Tensor.fromFloat32("BF16", [64, 256], values),
        "model.embed_tokens.weight": Tensor.fromFloat32("F16", [64, 256], values),
      },
      { format: "pt" },
    );
  }
  return undefined;
}

if (!skipReason) {
  try {
    skipReason = prepare();
  } catch (error) {
    rmSync(work, { recursive: true, force: true }); // no test runs, so the after() hook would not either
    throw error;
  }
  if (skipReason) console.error(`\n!!! packed-package tests are SKIPPED: ${skipReason} !!!\n`);
}

const abi = process.versions.modules;
const platformDir = `prebuilds/${process.platform}-${process.arch}`;
/** Node-API only: one binary for every Node version. */
const prebuildName = `${platformDir}/node.napi.glibc.node`;
const copyPrebuildName = `${platformDir}/safetensors_copy/node.napi.glibc.node`;
/** V8's API: one binary per Node ABI. */
const v8PrebuildName = `${platformDir}/safetensors_v8/node.abi${abi}.glibc.node`;
const prebuilt = process.platform === "linux" && (process.arch === "x64" || process.arch === "arm64");
const notPrebuilt = `prebuilds are made for linux-x64 and linux-arm64; this is ${process.platform}-${process.arch}`;

function doctor(dir: string, env: NodeJS.ProcessEnv = {}): string {
  return ok(
    run(process.execPath, [join(dir, "node_modules", "safetensors-ts", "bin", "safetensors.js"), "doctor"], dir, env),
    "doctor",
  );
}

/** The README's TypeScript library example, as the user copies it. */
function readmeExample(): string {
  const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
  const code = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)]
    .map((match) => match[1]!)
    .find((block) => block.includes('from "safetensors-ts"'));
  assert.ok(code !== undefined, "README's library example not found");
  return code;
}

function tsconfig(dir: string, name: string, options: Record<string, unknown>, files: readonly string[]): string {
  const path = join(dir, name);
  const compilerOptions = { target: "ES2022", strict: true, skipLibCheck: false, types: [], ...options };
  writeFileSync(path, JSON.stringify({ compilerOptions, files }, null, 2));
  return path;
}

/**
 * `tsc -p` of each of `configs` (all run, then failing with every project's errors), in one process:
 * test/helpers/tsc-projects.mjs. Five tsc processes took 31 s of CPU, most of it loading the compiler and lib.dom.d.ts.
 */
function tsc(dir: string, what: string, configs: readonly string[]): void {
  ok(run(TSC_NODE, [TSC_PROJECTS, ...configs], dir), what);
}

describe("packed package (slow: npm pack + installs + tsc + esbuild)", { skip: skipReason }, () => {
  test("the tarball holds the built code, the prebuilt addon and the sources to rebuild it, not tests", (t) => {
    if (skipReason) return t.skip(skipReason);
    for (const file of [
      "dist/index.d.ts",
      "dist/node.d.ts",
      "dist/lib/index.js",
      "dist/lib/node.js",
      "dist/lib/merge-worker.js",
      "dist/lib/gguf-worker.js",
      "bin/safetensors.js",
      "dist/bundle/cli.js",
      "dist/bundle/merge-worker.js",
      "dist/bundle/gguf-worker.js",
    ]) {
      assert.ok(packed.includes(file), `${file} is not in the tarball`);
    }
    for (const file of ["binding.gyp", "native/safetensors_native.c", "native/copy.c", "scripts/build-native.mjs"]) {
      assert.ok(packed.includes(file), `${file} is not in the tarball`);
    }
    // The web inspector `safetensors view` serves: its page and hashed assets, built at pack time.
    assert.ok(packed.includes("dist/inspector/index.html"), "dist/inspector/index.html is not in the tarball");
    assert.ok(
      packed.some((name) => /^dist\/inspector\/assets\/main-\w+\.js$/.test(name)),
      "no inspector script",
    );
    if (prebuilt) {
      for (const file of [prebuildName, copyPrebuildName, v8PrebuildName]) {
        assert.ok(packed.includes(file), `${file} is not in the tarball:\n${packed.join("\n")}`);
      }
    }
    // Only what users run: no tests or sources, no source maps, and the code once: the library's bundle (dist/lib),
    // the CLI's (dist/bundle) and the inspector's page, not the compiled modules they are made from (their types
    // ship).
    assert.deepEqual(
      packed.filter((name) => /^(test|bench|src|build|dist\/cli)\/|\.map$/.test(name)),
      [],
    );
    assert.deepEqual(
      packed.filter((name) => /^dist\/.*\.js$/.test(name) && !/^dist\/(lib|bundle|inspector)\//.test(name)),
      [],
    );
  });

  test("installed with --ignore-scripts: the prebuilt addons load, views are uncounted, mmap is the default", (t) => {
    if (skipReason) return t.skip(skipReason);
    if (!prebuilt) return t.skip(notPrebuilt);
    const report = doctor(noScripts);
    assert.ok(!existsSync(join(noScripts, "node_modules", "safetensors-ts", "build")), "something ran a build");
    assert.match(
      report,
      new RegExp(
        `native addon: loaded from .*${prebuildName.replaceAll(".", "\\.")} \\(prebuilt binary shipped in the package\\)`,
      ),
    );
    assert.match(
      report,
      new RegExp(`mapped views: not counted by V8 \\(.*${v8PrebuildName.replaceAll(".", "\\.")}, prebuilt binary`),
    );
    assert.match(report, /default backend \(auto\): mmap/);
    // The copy addon (copy_file_range, direct copies) comes from its own prebuild too. (What it does is tested in the
    // checkout, test/save-views.test.ts and test/save-direct.test.ts: the package ships bundles, not the module that counts copies.)
    assert.match(
      report,
      new RegExp(
        `copy addon: loaded from .*${copyPrebuildName.replaceAll(".", "\\.")} \\(prebuilt binary shipped in the package\\)`,
      ),
    );
  });

  test("installed with install scripts: the package has none, npm prints no warning, the prebuilds load", (t) => {
    if (skipReason) return t.skip(skipReason);
    const manifest = JSON.parse(
      readFileSync(join(withScripts, "node_modules", "safetensors-ts", "package.json"), "utf8"),
    );
    const lifecycle = ["preinstall", "install", "postinstall"].filter((name) => manifest.scripts?.[name]);
    assert.deepEqual(lifecycle, [], "the package runs scripts at install (pnpm and Bun block them and ask the user)");
    assert.doesNotMatch(installLog, /npm warn/i);
    assert.ok(!existsSync(join(withScripts, "node_modules", "safetensors-ts", "build")), "something built");
    if (!prebuilt) return t.skip(notPrebuilt);
    const report = doctor(withScripts);
    assert.match(report, /default backend \(auto\): mmap/);
    assert.match(report, /loaded from .*prebuilds/);
  });

  test("README example: typechecks under NodeNext and Bundler, and runs", (t) => {
    if (skipReason) return t.skip(skipReason);
    writeFileSync(join(withScripts, "example.ts"), `${readmeExample()}\nconsole.log("example ran");\n`);
    // `using` needs the Disposable lib (or @types/node); the published types themselves do not (next test).
    const lib = ["ES2022", "DOM", "ESNext.Disposable"];
    const nodeNext = { module: "NodeNext", moduleResolution: "NodeNext", lib, outDir: "out" };
    const bundler = { module: "ESNext", moduleResolution: "Bundler", lib, noEmit: true };
    tsc(withScripts, "tsc NodeNext, tsc Bundler", [
      tsconfig(withScripts, "tsconfig.nodenext.json", nodeNext, ["example.ts"]),
      tsconfig(withScripts, "tsconfig.bundler.json", bundler, ["example.ts"]),
    ]);
    const ran = ok(run(process.execPath, [join("out", "example.js")], withScripts), "node out/example.js");
    // The example lists the tensors, reads 8 rows of the embedding, and saves them.
    assert.match(ran, /^model\.embed_tokens\.weight F16 \[ 64, 256 \]$/m);
    assert.match(ran, /^F16 \[ 8, 256 \] Float32Array\(4\)/m);
    assert.match(ran, /^example ran$/m);
    assert.ok(existsSync(join(withScripts, "rows.safetensors")), "saveFile wrote nothing");
  });

  test("published types compile with lib ES2022 + DOM only, no @types/node, skipLibCheck false; entry points are what they say", (t) => {
    if (skipReason) return t.skip(skipReason);
    writeFileSync(
      join(noScripts, "types.ts"),
      `import { loadFile, openFile, saveFile, type OpenFileOptions, Tensor } from "safetensors-ts";
import { deserialize, parseSliceSpec, type SafetensorsFile, SafetensorError, serialize } from "safetensors-ts/core";
import { defaultBackend, openFile as openFromNode } from "safetensors-ts/node";
// @ts-expect-error the core has no file API
import { openFile as notInCore } from "safetensors-ts/core";
// @ts-expect-error helpers shared inside the package are not exported
import { compareCodePoints, quoteName, readHeaderJsonFast, checkRange } from "safetensors-ts/core";
const options: OpenFileOptions = { backend: "pread" };
const file: SafetensorsFile = openFile("model.safetensors", options);
file[Symbol.dispose]();
const bytes = serialize({ w: Tensor.fromFloat32("F32", [2], [1, 2]) });
const again: Map<string, Tensor> = deserialize(bytes).tensors;
export const used = [loadFile, saveFile, parseSliceSpec, SafetensorError, defaultBackend, openFromNode, again];
export const unused = [notInCore, compareCodePoints, quoteName, readHeaderJsonFast, checkRange];
`,
    );
    const lib = ["ES2022", "DOM"];
    const configs = (
      [
        ["nodenext", { module: "NodeNext", moduleResolution: "NodeNext", lib, noEmit: true }],
        ["bundler", { module: "ESNext", moduleResolution: "Bundler", lib, noEmit: true }],
      ] as const
    ).map(([name, options]) => tsconfig(noScripts, `tsconfig.types-${name}.json`, options, ["types.ts"]));
    // A browser build's resolution (the "browser" condition) sees the core's types for "safetensors-ts".
    writeFileSync(
      join(noScripts, "browser-types.ts"),
      `import { deserialize } from "safetensors-ts";
// @ts-expect-error in a browser "safetensors-ts" is the core
import { openFile } from "safetensors-ts";
export const used = [deserialize, openFile];
`,
    );
    const browser = { module: "ESNext", moduleResolution: "Bundler", customConditions: ["browser"], lib, noEmit: true };
    configs.push(tsconfig(noScripts, "tsconfig.browser.json", browser, ["browser-types.ts"]));
    tsc(noScripts, "tsc NodeNext and Bundler with lib ES2022, DOM, and Bundler with the browser condition", configs);
    // At run time in Node: "." is the Node entry, the core has no file API and no internals, deep imports are refused.
    const probe = `const root = await import("safetensors-ts"), node = await import("safetensors-ts/node"), core = await import("safetensors-ts/core");
const names = (m) => Object.keys(m).sort().join(",");
let deep = "allowed";
try { await import("safetensors-ts/dist/format/header.js"); } catch (e) { deep = e.code; }
// Loaded on first call (scripts/esbuild-lazy.mjs): the lazy chunk's error is the entry's SafetensorError class.
const lazy = (m) => { try { m.parseMergeConfig({}); } catch (e) { return e instanceof root.SafetensorError && e.code; } };
console.log(JSON.stringify({ same: names(root) === names(node), core: Object.keys(core), deep, lazy: [lazy(root), lazy(core)] }));`;
    const result = JSON.parse(
      ok(run(process.execPath, ["--input-type=module", "-e", probe], noScripts), "import probe"),
    );
    assert.equal(result.same, true);
    assert.equal(result.deep, "ERR_PACKAGE_PATH_NOT_EXPORTED");
    assert.deepEqual(result.lazy, ["InvalidMergeConfig", "InvalidMergeConfig"]);
    for (const name of ["deserialize", "serialize", "Tensor", "SafetensorsFile", "parseSliceSpec"]) {
      assert.ok(result.core.includes(name), `core lacks ${name}`);
    }
    for (const name of ["openFile", "loadFile", "saveFile", "compareCodePoints", "quoteName", "readHeaderJsonFast"]) {
      assert.ok(!result.core.includes(name), `core exports ${name}`);
    }
  });

  test("the core bundles for the browser with esbuild: no node: import, and it runs without Node's APIs", async (t) => {
    if (skipReason) return t.skip(skipReason);
    const esbuild = await import("esbuild");
    writeFileSync(
      join(noScripts, "browser.ts"),
      `import { deserialize, serialize, Tensor } from "safetensors-ts/core";
import * as root from "safetensors-ts"; // the "browser" condition: the core again
export function roundTrip(): string {
  const bytes = serialize({ w: Tensor.fromFloat32("BF16", [2, 2], [1, 2, 3, 4]) }, { format: "pt" });
  const { tensors, metadata } = root.deserialize(bytes);
  const names = [...deserialize(bytes).tensors.keys()];
  return JSON.stringify([names, [...tensors.get("w")!.toFloat32()], Object.fromEntries(metadata ?? [])]);
}
`,
    );
    const result = await esbuild.build({
      absWorkingDir: noScripts,
      entryPoints: ["browser.ts"],
      bundle: true,
      platform: "browser",
      format: "iife",
      globalName: "lib",
      write: false,
      logLevel: "silent",
    });
    const code = result.outputFiles[0]!.text;
    assert.doesNotMatch(code, /["'`]node:/, "the browser bundle imports a node: module");
    assert.doesNotMatch(code, /\brequire\(/);
    // A context with only the language's globals and the web's text codecs: no process, Buffer or require.
    const context = { TextEncoder, TextDecoder };
    const value = runInNewContext(`${code};lib.roundTrip()`, context);
    assert.equal(value, JSON.stringify([["w"], [1, 2, 3, 4], { format: "pt" }]));
  });

  test("a prebuild that does not load falls back to pure JavaScript: doctor says why, opens work", (t) => {
    if (skipReason) return t.skip(skipReason);
    if (!prebuilt) return t.skip(notPrebuilt);
    const broken = join(work, "app-broken");
    cpSync(noScripts, broken, { recursive: true });
    writeFileSync(join(broken, "node_modules", "safetensors-ts", prebuildName), "truncated download");
    const report = doctor(broken);
    assert.match(
      report,
      /native addon: not available \(.*node\.napi\.glibc\.node: cannot load: .*build.Release.safetensors_native\.node: not built/,
    );
    assert.match(report, /default backend \(auto\): pread/);
    const use = `import { loadFile, openFile } from "safetensors-ts";
const file = openFile("model.safetensors");
const t = file.getTensor("lm_head.weight");
console.log(file.backend, t.shape.join("x"), loadFile("model.safetensors").size);`;
    writeFileSync(join(broken, "use.mjs"), use);
    assert.equal(
      ok(run(process.execPath, ["use.mjs"], broken), "open with a broken prebuild").trim(),
      "pread 64x256 2",
    );
    // With a working build from source beside it, that one loads and doctor names the prebuild it passed over.
    const release = join(broken, "node_modules", "safetensors-ts", "build", "Release");
    mkdirSync(release, { recursive: true });
    cpSync(join(noScripts, "node_modules", "safetensors-ts", prebuildName), join(release, "safetensors_native.node"));
    const fallback = doctor(broken);
    assert.match(fallback, /loaded from .*build.Release.safetensors_native\.node \(built from source\)/);
    assert.match(fallback, /passed over: .*node\.napi\.glibc\.node: cannot load: /);
    assert.match(fallback, /default backend \(auto\): mmap/);
    // A per-ABI binary that does not load leaves the addon working with counted windows, and doctor says why.
    const counted = join(work, "app-counted");
    cpSync(noScripts, counted, { recursive: true });
    writeFileSync(join(counted, "node_modules", "safetensors-ts", v8PrebuildName), "truncated download");
    const countedReport = doctor(counted);
    assert.match(countedReport, /mapped views: counted as external memory .*node\.abi\d+\.glibc\.node: cannot load/);
    assert.match(countedReport, /default backend \(auto\): mmap/);
    writeFileSync(join(counted, "use.mjs"), use);
    assert.equal(ok(run(process.execPath, ["use.mjs"], counted), "open with counted windows").trim(), "mmap 64x256 2");
    // And SAFETENSORS_NO_NATIVE=1 still turns a working addon off.
    const off = doctor(noScripts, { SAFETENSORS_NO_NATIVE: "1" });
    assert.match(off, /not available \(SAFETENSORS_NO_NATIVE is set\)/);
  });
});
