#!/usr/bin/env node
/**
 * Bundles the compiled library entries (dist/node.js, dist/index.js) into dist/lib/: each entry plus the chunks they
 * share, so that the core's classes (SafetensorError, Tensor...) are one and the same whichever entry a program
 * imports. Importing ~100 modules one by one (a resolution, a file read and a compile each) was most of what an
 * import cost; the figures are in bench/figures/import.ts. Node's builtins come through esbuild-builtins.mjs, and the
 * subsystems few programs call (GGUF, pickle, merges, integrity, WebGPU, edits) load on first use
 * (esbuild-lazy.mjs). The output stays two folders below the package root, as the addon loaders expect (prebuilds/
 * at `../../`). Browsers get the core whole (dist/lib/browser, the "browser" condition). Types stay the compiled
 * ones (dist/*.d.ts).
 */
import { rmSync } from "node:fs";
import { build } from "esbuild";
import { builtinsLogOverride, builtinsPlugin } from "./esbuild-builtins.mjs";
import { checkEagerFiles, lazyPlugin } from "./esbuild-lazy.mjs";

const minify = !process.argv.includes("--no-minify");
// esbuild adds to its outdir: chunks of earlier builds (new hashes each time) would pile up and ship.
rmSync("dist/lib", { recursive: true, force: true });
// The subsystems few programs call load on first use (scripts/esbuild-lazy.mjs says how and why).
const lazy = await lazyPlugin({ root: process.cwd(), entries: ["dist/node.js", "dist/index.js"] });
await build({
  entryPoints: { node: "dist/node.js", index: "dist/index.js", ...lazy.lazyEntries },
  outdir: "dist/lib",
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  packages: "external",
  chunkNames: "[name]-[hash]",
  minifyWhitespace: minify,
  minifySyntax: minify,
  legalComments: "none",
  logLevel: "warning",
  logOverride: { ...builtinsLogOverride, ...lazy.logOverride },
  plugins: [lazy.plugin, builtinsPlugin],
});
checkEagerFiles("dist/lib/node.js", 3);
checkEagerFiles("dist/lib/index.js", 2);
// The worker threads' modules, found beside the chunk that starts them (src/merge/node-pool.ts,
// src/gguf/node-pool.ts): the package ships these bundles, not the compiled modules they are made from. Built on
// their own, whole: a thread shares no class with the main bundle, and as entries of the build above they split
// its eager code into more chunks (files a process opens at import).
await build({
  entryPoints: { "merge-worker": "dist/merge/node-worker.js", "gguf-worker": "dist/gguf/node-quant-worker.js" },
  outdir: "dist/lib",
  bundle: true,
  format: "esm",
  platform: "node",
  target: "node20",
  packages: "external",
  minifyWhitespace: minify,
  minifySyntax: minify,
  legalComments: "none",
  logLevel: "warning",
  logOverride: builtinsLogOverride,
  plugins: [builtinsPlugin],
});
// The core for browsers (the "browser" condition): no synchronous loader there, so the whole core, eagerly.
await build({
  entryPoints: { index: "dist/index.js" },
  outdir: "dist/lib/browser",
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  packages: "external",
  minifyWhitespace: minify,
  minifySyntax: minify,
  legalComments: "none",
  logLevel: "warning",
});
