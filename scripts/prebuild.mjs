#!/usr/bin/env node
// Builds the prebuilt binary that ships inside the package: prebuilds/<platform>-<arch>/node.abi<N>.<libc>.node,
// the layout and names node-gyp-build's resolver matches (src/io/native-load.ts). Run at pack time ("prepack"), so
// a user whose npm runs no install scripts still gets the native addon.
//
// The addon uses V8's API next to Node-API, so the binary is tagged with this Node's ABI (`process.versions.modules`),
// not `napi`; other Node versions build from source at install (scripts/build-native.mjs) or run on pure JavaScript.
// It builds offline: node-gyp gets the local Node headers through npm_config_nodedir (the same search as the install
// step), never a download. Unlike the install step it fails loudly: a package must not be packed without its binary.
//
//   node scripts/prebuild.mjs          build prebuilds/ for this Node (the "prepack" script)
//   node scripts/prebuild.mjs --verbose  the same, showing node-gyp's output
//   node scripts/prebuild.mjs --clean  remove prebuilds/ (the "postpack" script: a checkout keeps loading the
//                                      build/Release it rebuilds, never a binary left over from an earlier pack)
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { join, relative } from "node:path";
import { findNodeDir, findNodeGyp, missingTool, root } from "./native-tools.mjs";

const outDir = join(root, "prebuilds");

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
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
rmSync(outDir, { recursive: true, force: true });
// prebuildify copies process.env into the environment of node-gyp, which reads npm_config_nodedir as --nodedir.
process.env.npm_config_nodedir = nodeDir.dir;
const started = Date.now();
await new Promise((done) => {
  prebuildify(
    {
      cwd: root,
      targets: [{ runtime: "node", target: process.versions.node }],
      napi: false,
      name: "node", // the runtime tag first: node.abi115.glibc.node, as in node-gyp-build's own examples
      tagLibc: true, // a glibc binary must not be picked on musl (Alpine): there it builds from source instead
      strip: true,
      nodeGyp: gyp,
      quiet: !process.argv.includes("--verbose"),
    },
    (error) => (error ? fail(`prebuildify failed: ${error.message ?? error} (--verbose shows why)`) : done()),
  );
});

const dir = join(outDir, `${process.platform}-${process.arch}`);
const files = existsSync(dir) ? readdirSync(dir).filter((name) => name.endsWith(".node")) : [];
if (files.length !== 1) fail(`expected one binary in ${relative(root, dir)}, found ${files.length}`);
const binary = join(dir, files[0]);
try {
  const addon = require(binary);
  if (typeof addon.open !== "function") fail(`${relative(root, binary)} does not export open()`);
} catch (error) {
  fail(`${relative(root, binary)} does not load: ${error.message}`);
}
// prebuildify moves the binary out of build/Release; put a copy back so that this checkout keeps its addon.
const release = join(root, "build", "Release");
mkdirSync(release, { recursive: true });
copyFileSync(binary, join(release, "safetensors_native.node"));
const seconds = ((Date.now() - started) / 1000).toFixed(1);
console.log(`prebuild: built ${relative(root, binary)} in ${seconds}s`);
