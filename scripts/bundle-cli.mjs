#!/usr/bin/env node
/**
 * Bundles the compiled CLI (dist/cli/main.js) into dist/bundle/: the entry plus chunks shared by the commands, each
 * command's own code loaded when it runs. `inspect --json` of the 2.37 GiB benchmark checkpoint as a whole process
 * (callgrind, all threads, NODE_EXTRA_CA_CERTS unset): 260 M instructions over the ~90 modules of dist/ (a
 * resolution, a file read and a compile each), 194 M from this bundle; bare `node` on an empty module is ~100 M.
 * The output stays two folders below the package root, as the addon loaders expect (prebuilds/ at `../../`).
 */
import { rmSync } from "node:fs";
import { build } from "esbuild";
import { builtinsLogOverride, builtinsPlugin } from "./esbuild-builtins.mjs";
import { yamlPlugin } from "./esbuild-yaml.mjs";

const minify = !process.argv.includes("--no-minify");
// esbuild adds to its outdir: chunks of earlier builds (new hashes each time) would pile up and ship.
rmSync("dist/bundle", { recursive: true, force: true });
await build({
  // The worker threads (to-gguf's quantizing workers, merge's chunk workers), found beside the chunk that starts them
  // (src/gguf/node-pool.ts, src/merge/node-pool.ts).
  entryPoints: {
    cli: "dist/cli/main.js",
    "gguf-worker": "dist/gguf/node-quant-worker.js",
    "merge-worker": "dist/merge/node-worker.js",
  },
  outdir: "dist/bundle",
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  packages: "external",
  chunkNames: "[name]-[hash]",
  minifyWhitespace: minify,
  minifySyntax: minify,
  sourcemap: "linked",
  legalComments: "none",
  logLevel: "warning",
  logOverride: builtinsLogOverride,
  plugins: [yamlPlugin, builtinsPlugin],
});
