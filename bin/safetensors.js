#!/usr/bin/env node
// The compiled CLI (built by `npm install` through the package's prepare script); falls back to running the
// TypeScript sources through tsx when dist/ is missing (a checkout where the build has not run).
const run = async () => {
  let cli;
  try {
    cli = await import("../dist/cli/main.js");
  } catch (error) {
    if (error?.code !== "ERR_MODULE_NOT_FOUND") throw error;
    const { register } = await import("tsx/esm/api");
    register();
    cli = await import("../src/cli/main.ts");
  }
  process.exitCode = await cli.main(process.argv.slice(2));
};
run();
