/** Feature detection on the built package, for figures whose API is still being added. */
import * as fs from "node:fs";
import { fileURLToPath } from "node:url";
import { PACKAGE_NAME } from "../spec.js";

/**
 * Whether the package's `loadFile` takes `{populate: true}`, read from the type declarations it ships next to the
 * entry point Node resolves (an unknown option would be ignored silently at run time, so the call cannot tell).
 */
export function loadFileHasPopulate(): boolean {
  const entry = fileURLToPath(import.meta.resolve(PACKAGE_NAME));
  // The entry re-exports the file API from read/node-files (since the CLI imports that module without the entry).
  return [".d.ts", "-files.d.ts"].some((suffix) => {
    try {
      return /\bpopulate\?\s*:/.test(fs.readFileSync(entry.replace(/\.js$/, suffix), "utf8"));
    } catch {
      return false;
    }
  });
}
