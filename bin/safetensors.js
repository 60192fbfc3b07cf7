#!/usr/bin/env node
// The CLI as built by `npm install` (the package's prepare script): dist/bundle/ (esbuild: the entry plus a chunk per
// command, what a start-up costs least with), else the compiled modules in dist/cli/, else the TypeScript sources
// through tsx (a checkout where the build has not run).
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
