/**
 * What importing the built library (dist/lib, scripts/bundle-lib.mjs) costs a process: which files it loads, which of
 * Node's builtins, and what stays out of the eager code until first use (scripts/esbuild-lazy.mjs,
 * scripts/esbuild-builtins.mjs). Skipped without dist/ (`npm run build`).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import { DEFAULT_GGUF_LIMITS, GGML_TYPES, GGUF_VALUE_TYPES, QUANT_TYPES } from "../src/index.js";
import { repoRoot } from "./helpers/reference.js";

const lib = join(repoRoot, "dist", "lib");
const skip = existsSync(join(lib, "node.js")) ? undefined : "dist/lib is not built (npm run build)";
const major = Number(process.versions.node.split(".")[0]);

interface Lazy {
  checkEagerFiles(entry: string, most: number): Set<string>;
}

async function eagerText(entry: string): Promise<{ files: string[]; text: string }> {
  const { checkEagerFiles } = (await import(pathToFileURL(join(repoRoot, "scripts", "esbuild-lazy.mjs")).href)) as Lazy;
  const files = [...checkEagerFiles(join(lib, entry), 3)];
  return { files: files.map((f) => basename(f)), text: files.map((f) => readFileSync(f, "utf8")).join("\n") };
}

/** The builtins (process.moduleLoadList) a fresh process loads while it runs `code` after importing `entry`. */
function loadedBy(entry: string, code: string, env: Record<string, string> = {}): Record<string, unknown> {
  const url = pathToFileURL(join(lib, entry)).href;
  const script = `const before = new Set(process.moduleLoadList);
const m = await import(${JSON.stringify(url)});
const atImport = process.moduleLoadList.filter((x) => !before.has(x));
const result = await (async () => { ${code} })();
const after = process.moduleLoadList.filter((x) => !before.has(x));
console.log(JSON.stringify({ atImport, after, result }));`;
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    env: { ...process.env, ...env },
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout.trim().split("\n").at(-1)!) as Record<string, unknown>;
}

const has = (list: unknown, name: string) => (list as string[]).includes(`NativeModule ${name}`);

describe("importing the bundles", { skip }, () => {
  test("the eager code holds no lazy chunk, nor the GGUF reader, quants and type tables (their constants do load)", async () => {
    for (const entry of ["node.js", "index.js"]) {
      const { files, text } = await eagerText(entry);
      assert.deepEqual(
        files.filter((f) => f.startsWith("lazy-")),
        [],
        entry,
      );
      // GgufNeedBytes (reader.ts), BLOCK_BYTES (quants.ts), OTHER_TYPES (types.ts): in the lazy chunk only.
      for (const name of ["GgufNeedBytes", "BLOCK_BYTES", "OTHER_TYPES"]) {
        assert.ok(!text.includes(name), `${entry}'s eager code holds ${name}`);
        assert.ok(readFileSync(join(lib, "lazy-gguf.js"), "utf8").includes(name), `lazy-gguf.js lacks ${name}`);
      }
    }
  });

  test("no regex with a Unicode property escape in the eager code (V8 builds its ICU set when it parses one)", async () => {
    for (const entry of ["node.js", "index.js"]) {
      const { text } = await eagerText(entry);
      assert.doesNotMatch(text, /(?<!\\)\\[pP]\{/, entry);
    }
  });

  test("the GGUF constants are there at import, and agree with the lazy functions once those load", () => {
    const { atImport, result } = loadedBy(
      "index.js",
      `return { limits: m.DEFAULT_GGUF_LIMITS, q8: m.GGML_TYPES.Q8_0, string: m.GGUF_VALUE_TYPES.STRING,
  quants: m.QUANT_TYPES, byId: m.ggmlType(8), bytes: m.blockBytes("Q8_0") };`,
    );
    assert.ok(Array.isArray(atImport));
    const r = result as Record<string, unknown>;
    // The sources' values (the bundle's are a copy through JSON, which these plain tables survive).
    assert.deepEqual(r.limits, DEFAULT_GGUF_LIMITS);
    assert.deepEqual(r.q8, GGML_TYPES.Q8_0);
    assert.equal(r.string, GGUF_VALUE_TYPES.STRING);
    assert.deepEqual(r.quants, QUANT_TYPES);
    assert.deepEqual(r.byId, { id: 8, blockSize: 32, typeSize: 34, name: "Q8_0" });
    assert.equal(r.bytes, 34);
  });

  test("the Node entry loads neither worker_threads nor crypto nor zlib at import; the merges' chunk loads worker_threads", () => {
    // Without the addon on every Node; with it from Node 24 (on 20 and 22 the addon's loading needs worker_threads).
    const runs: Record<string, string>[] = [{ SAFETENSORS_NO_NATIVE: "1" }, ...(major >= 24 ? [{}] : [])];
    for (const env of runs) {
      const { atImport, after, result } = loadedBy(
        "node.js",
        "try { m.parseMergeConfig({}); } catch (e) { return e.code; }",
        env,
      );
      for (const name of ["worker_threads", "crypto", "zlib"]) assert.ok(!has(atImport, name), `${name} at import`);
      assert.equal(result, "InvalidMergeConfig");
      assert.ok(has(after, "worker_threads"), "the merges' chunk reads isMainThread");
    }
  });
});

describe("the CLI's bundle", {
  skip: existsSync(join(repoRoot, "dist", "bundle", "cli.js")) ? undefined : "dist/bundle is not built",
}, () => {
  test("merge-models parses its YAML with the bundled parser, not the yaml package's ~100 modules", () => {
    const cli = pathToFileURL(join(repoRoot, "dist", "bundle", "cli.js")).href;
    const dir = mkdtempSync(join(tmpdir(), "bundle-yaml-"));
    try {
      const config = join(dir, "merge.yml");
      writeFileSync(config, "merge_method: linear\nmodels:\n  - model: ./absent-a\n  - model: ./absent-b\n");
      const script = `import { createRequire } from "node:module";
const { main } = await import(${JSON.stringify(cli)});
const code = await main(["merge-models", ${JSON.stringify(config)}, ${JSON.stringify(join(dir, "out"))}]);
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((p) => /[\\\\/]node_modules[\\\\/]yaml[\\\\/]/.test(p));
console.log(JSON.stringify({ code, loaded }));`;
      const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", cwd: dir });
      assert.equal(run.status, 0, run.stderr);
      const { code, loaded } = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as { code: number; loaded: string[] };
      // Parsed: the error is the absent model's, which the config names.
      assert.notEqual(code, 0);
      assert.match(run.stderr, /absent-a/);
      assert.deepEqual(loaded, []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
