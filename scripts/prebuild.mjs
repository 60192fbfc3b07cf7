#!/usr/bin/env node
// Builds the prebuilt binaries that ship inside the package, in the layout node-gyp-build's tag rules read
// (src/io/native-load.ts): the main addon at prebuilds/<platform>-<arch>/node.abi<N>.<libc>.node, and each other
// target of binding.gyp in a folder of its name, prebuilds/<platform>-<arch>/<target>/node.<tag>.<libc>.node. Run at
// pack time ("prepack"), so a user whose npm runs no install scripts still gets the native code.
//
// The main addon uses V8's API next to Node-API, so it is tagged with this Node's ABI (`process.versions.modules`),
// not `napi`; other Node versions build from source at install (scripts/build-native.mjs) or run on pure JavaScript.
// It builds offline: node-gyp gets the local Node headers through npm_config_nodedir (the same search as the install
// step), never a download. Unlike the install step it fails loudly: a package must not be packed without its binary.
//
// prebuildify builds and names the main addon. It takes the first .node file it finds in build/Release, so this
// script is also the node-gyp it runs (argument "rebuild"): it runs the real node-gyp, then moves the other targets'
// binaries aside, and files them under their own names once prebuildify is done.
//
//   node scripts/prebuild.mjs            build prebuilds/ for this Node (the "prepack" script)
//   node scripts/prebuild.mjs --verbose  the same, showing node-gyp's output
//   node scripts/prebuild.mjs --clean    remove prebuilds/ (the "postpack" script: a checkout keeps loading the
//                                        build/Release it rebuilds, never a binary left over from an earlier pack)
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { findNodeDir, findNodeGyp, missingTool, root } from "./native-tools.mjs";

/** binding.gyp's targets: how each binary is tagged, and a function it must export (a check that it loads). */
const TARGETS = {
  safetensors_native: { tag: "abi", exports: "open" }, // V8 API: one Node ABI
  safetensors_copy: { tag: "napi", exports: "copyRange" }, // plain Node-API: every Node version
};
const MAIN = "safetensors_native";

const outDir = join(root, "prebuilds");
const release = join(root, "build", "Release");
const aside = join(root, "build", "prebuild-aside");
const REAL_GYP = "SAFETENSORS_PREBUILD_NODE_GYP";

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
}

if (process.argv[2] === "rebuild" && process.env[REAL_GYP]) {
  // Called by prebuildify as its node-gyp.
  const result = spawnSync(process.execPath, [process.env[REAL_GYP], ...process.argv.slice(2)], { stdio: "inherit" });
  if (result.status === 0) {
    rmSync(aside, { recursive: true, force: true });
    mkdirSync(aside, { recursive: true });
    for (const name of readdirSync(release).filter((n) => n.endsWith(".node") && n !== `${MAIN}.node`)) {
      renameSync(join(release, name), join(aside, name));
    }
  }
  process.exit(result.status ?? 1);
}

if (process.argv.includes("--clean")) {
  rmSync(outDir, { recursive: true, force: true });
  process.exit(0);
}

const tool = missingTool();
if (tool) fail(tool);
const gyp = findNodeGyp();
if (!gyp) fail("node-gyp not found");
const nodeDir = findNodeDir();
if (!nodeDir.dir) fail(nodeDir.missing);

const require = createRequire(import.meta.url);
const prebuildify = require("prebuildify");
const libc = process.env.PREBUILD_LIBC || (existsSync("/etc/alpine-release") ? "musl" : "glibc");
const dir = join(outDir, `${process.platform}-${process.arch}`);
rmSync(outDir, { recursive: true, force: true });
// prebuildify copies process.env into the environment of node-gyp, which reads npm_config_nodedir as --nodedir.
process.env.npm_config_nodedir = nodeDir.dir;
process.env[REAL_GYP] = gyp;
const started = Date.now();
await new Promise((done) => {
  prebuildify(
    {
      cwd: root,
      targets: [{ runtime: "node", target: process.versions.node }],
      napi: false,
      name: "node", // the runtime tag first: node.abi115.glibc.node, as in node-gyp-build's own examples
      tagLibc: true, // a glibc binary must not be picked on musl (Alpine): there it builds from source instead
      libc,
      strip: true,
      nodeGyp: fileURLToPath(import.meta.url),
      quiet: !process.argv.includes("--verbose"),
    },
    (error) => (error ? fail(`prebuildify failed: ${error.message ?? error} (--verbose shows why)`) : done()),
  );
});

/** Load `path` and check it exports `name()`; then keep a copy in build/Release for this checkout. */
function check(path, target) {
  try {
    if (typeof require(path)[TARGETS[target].exports] !== "function") {
      fail(`${relative(root, path)} does not export ${TARGETS[target].exports}()`);
    }
  } catch (error) {
    fail(`${relative(root, path)} does not load: ${error.message}`);
  }
  // prebuildify moved the main binary out of build/Release, and this script the others: put copies back, so that
  // this checkout keeps its addons.
  copyFileSync(path, join(release, `${target}.node`));
}

const mains = existsSync(dir) ? readdirSync(dir).filter((name) => name.endsWith(".node")) : [];
if (mains.length !== 1) fail(`expected one binary in ${relative(root, dir)}, found ${mains.length}`);
const built = [join(dir, mains[0])];
check(built[0], MAIN);
for (const name of existsSync(aside) ? readdirSync(aside) : []) {
  const target = name.replace(/\.node$/, "");
  if (!TARGETS[target]) fail(`binding.gyp target ${target} has no entry in TARGETS (scripts/prebuild.mjs)`);
  const tags = TARGETS[target].tag === "napi" ? "napi" : `abi${process.versions.modules}`;
  mkdirSync(join(dir, target), { recursive: true });
  const path = join(dir, target, `node.${tags}.${libc}.node`);
  // Stripped like prebuildify strips the main binary (linux and macOS only).
  const stripArgs = { linux: ["--strip-all"], darwin: ["-Sx"] }[process.platform];
  if (stripArgs) {
    const strip = spawnSync("strip", [...stripArgs, join(aside, name)], { encoding: "utf8" });
    if (strip.status !== 0) fail(`strip ${name} failed: ${strip.stderr || strip.error?.message}`);
  }
  renameSync(join(aside, name), path);
  check(path, target);
  built.push(path);
}
rmSync(aside, { recursive: true, force: true });
const seconds = ((Date.now() - started) / 1000).toFixed(1);
console.log(`prebuild: built ${built.map((path) => relative(root, path)).join(", ")} in ${seconds}s`);
