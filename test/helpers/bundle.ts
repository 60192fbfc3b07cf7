/** The core entry point (src/index.ts) bundled for browsers by esbuild, as one ESM file at `outfile`. */
import * as path from "node:path";
import { repoRoot } from "./corpus.js";

export async function bundleCore(outfile: string): Promise<void> {
  const { build } = await import("esbuild");
  await build({
    entryPoints: [path.join(repoRoot, "src/index.ts")],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    outfile,
    logLevel: "silent",
  });
}
