#!/usr/bin/env node
/**
 * Compile src/gguf/q8-simd.wat into src/gguf/q8-wasm.ts (the module's bytes, base64) with wabt's wat2wasm.
 * wabt is not a dependency: run with WABT=/path/to/node_modules/wabt, or let npx fetch it:
 *   node scripts/build-gguf-wasm.mjs            (uses `npx -y wabt@1.0.39 wat2wasm`)
 *   node scripts/build-gguf-wasm.mjs --check    (exit 1 when q8-wasm.ts is not the .wat's compilation)
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const wat = path.join(root, "src/gguf/q8-simd.wat");
const target = path.join(root, "src/gguf/q8-wasm.ts");
const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "gguf-wasm-")), "q8.wasm");
const local = process.env.WABT && path.join(process.env.WABT, "bin", "wat2wasm");
if (local) execFileSync(local, [wat, "-o", out], { stdio: "inherit" });
else execFileSync("npx", ["-y", "wabt@1.0.39", "wat2wasm", wat, "-o", out], { stdio: "inherit" });
const base64 = fs.readFileSync(out).toString("base64");
const lines = base64.match(/.{1,100}/g).map((l) => `  "${l}"`);
const source = `/** q8-simd.wat compiled by scripts/build-gguf-wasm.mjs (wabt 1.0.39 wat2wasm). Do not edit: edit the .wat. */
export const Q8_WASM_BASE64 =
${lines.join(" +\n")};
`;
if (process.argv.includes("--check")) {
  const same = fs.existsSync(target) && fs.readFileSync(target, "utf8") === source;
  console.log(same ? "q8-wasm.ts is current" : "q8-wasm.ts differs from the .wat's compilation");
  process.exit(same ? 0 : 1);
}
fs.writeFileSync(target, source);
console.log(`wrote ${path.relative(root, target)} (${fs.statSync(out).size} bytes of wasm)`);
