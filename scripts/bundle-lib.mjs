#!/usr/bin/env node
/**
 * Bundles the compiled library entries (dist/node.js, dist/index.js) into dist/lib/: each entry plus the chunks they
 * share, so that the core's classes (SafetensorError, Tensor...) are one and the same whichever entry a program
 * imports. Importing ~100 modules one by one (a resolution, a file read and a compile each) was most of what an
 * import cost; the figures are in bench/figures/import.ts. Node's builtins come through esbuild-builtins.mjs. The output stays two folders below the package root, as
 * the addon loaders expect (prebuilds/ at `../../`). Types stay the compiled ones (dist/*.d.ts).
 */
import { rmSync } from "node:fs";
import { build } from "esbuild";
import { builtinsLogOverride, builtinsPlugin } from "./esbuild-builtins.mjs";

const minify = !process.argv.includes("--no-minify");
// esbuild adds to its outdir: chunks of earlier builds (new hashes each time) would pile up and ship.
rmSync("dist/lib", { recursive: true, force: true });
await build({
  // The worker threads' modules, found beside the chunk that starts them (src/merge/node-pool.ts,
  // src/gguf/node-pool.ts): the package ships these bundles, not the compiled modules they are made from.
  entryPoints: {
    node: "dist/node.js",
    index: "dist/index.js",
    "merge-worker": "dist/merge/node-worker.js",
    "gguf-worker": "dist/gguf/node-quant-worker.js",
  },
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
  logOverride: builtinsLogOverride,
  plugins: [builtinsPlugin],
});
