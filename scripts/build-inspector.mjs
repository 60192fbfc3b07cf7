#!/usr/bin/env node
// Builds the web inspector (inspector/) into dist/inspector/: index.html plus content-hashed assets, relative URLs
// only, nothing fetched from elsewhere, so the page works offline, served by `safetensors view` or opened from disk.
//
// The script is a classic deferred script (IIFE), not an ES module: Chromium refuses module scripts on file://
// pages (a CORS-blocked origin), and the page must work opened straight from disk with a dropped file.
// Run by `npm run build` and `prepare` (so `npm ci` and `npm pack` build it). Needs the devDependencies (esbuild,
// chart.js); without esbuild it says so and exits 0, leaving no half-built page behind.
//
//   node scripts/build-inspector.mjs [OUT]   OUT defaults to dist/inspector (the tests build into a scratch folder)
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "inspector");
const out = resolve(process.argv[2] ?? join(root, "dist", "inspector"));

let esbuild;
try {
  esbuild = await import("esbuild");
} catch {
  console.log("inspector: skipped (esbuild is not installed: install the devDependencies to build the page)");
  process.exit(0);
}

rmSync(out, { recursive: true, force: true });
const result = await esbuild.build({
  entryPoints: [join(source, "main.ts")],
  bundle: true,
  format: "iife",
  platform: "browser",
  target: "es2022",
  minify: true,
  legalComments: "linked",
  entryNames: "[name]-[hash]",
  outdir: join(out, "assets"),
  metafile: true,
  logLevel: "warning",
});

const outputs = Object.keys(result.metafile.outputs).map((file) => basename(file));
const script = outputs.find((name) => name.endsWith(".js"));
const style = outputs.find((name) => name.endsWith(".css"));
if (!script || !style) throw new Error(`inspector: unexpected build outputs ${outputs.join(", ")}`);
const html = readFileSync(join(source, "index.html"), "utf8")
  .replace("%STYLE%", `./assets/${style}`)
  .replace("%SCRIPT%", `./assets/${script}`);
mkdirSync(out, { recursive: true });
writeFileSync(join(out, "index.html"), html);
const bytes = Object.values(result.metafile.outputs).reduce((sum, o) => sum + o.bytes, 0);
console.log(
  `inspector: built ${relative(root, out) || out} (${outputs.length + 1} files, ${(bytes / 1024).toFixed(0)} KiB of assets)`,
);
