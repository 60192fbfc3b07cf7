#!/usr/bin/env node
// The CLI as built by `npm install` (the package's prepare script): dist/bundle/ (esbuild: the entry plus a chunk per
// command, what a start-up costs least with), else the compiled modules in dist/cli/, else the TypeScript sources
// through tsx (a checkout where the build has not run).
import module from "node:module";

// V8's compile cache (Node 22.1+; in the OS's temp folder, NODE_DISABLE_COMPILE_CACHE=1 turns it off) for the CLI's
// chunks, loaded below. `inspect` of a small file, callgrind, instructions with a warm cache against none (2026-12-02):
// Node 22 229 -> 199 M, 24 207 -> 180 M, 26 200 -> 174 M (`node -e 0`: 85-89 M). A library cannot do this for its
// users' imports; a command can.
module.enableCompileCache?.();
const run = async () => {
  let cli;
  for (const entry of ["../dist/bundle/cli.js", "../dist/cli/main.js"]) {
    try {
      cli = await import(entry);
      break;
    } catch (error) {
      if (error?.code !== "ERR_MODULE_NOT_FOUND" || !String(error.message).includes(entry.slice(3))) throw error;
    }
  }
  if (cli === undefined) {
    const { register } = await import("tsx/esm/api");
    register();
    cli = await import("../src/cli/main.ts");
  }
  process.exitCode = await cli.main(process.argv.slice(2));
};
run();
