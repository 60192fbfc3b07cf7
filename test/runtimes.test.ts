/**
 * The built package (dist/, bin/) in Bun and Deno, the runtimes of scripts/node-builds.mjs's RUNTIMES (`node
 * scripts/node-builds.mjs runtimes` installs them from npm; .ci/run does): the Node entry and the core import, a
 * corpus file round-trips through openFile, loadFile and saveFile, `open(url)` reads over HTTP, the README's ten-line
 * example runs, the CLI's inspect and validate agree with Node's, and doctor names the backend and why. Each runtime
 * not installed (nor on PATH) is skipped, saying so; so is everything without dist/ (`npm run build`) or the corpus.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import { saveFile, Tensor } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason } from "./helpers/corpus.js";
import { repoRoot } from "./helpers/reference.js";

interface Runtimes {
  RUNTIMES: { name: string; version: string }[];
  runtimeBin(name: string): { bin: string; version: string; missing?: string };
}
const builds = pathToFileURL(join(repoRoot, "scripts", "node-builds.mjs")).href;
const { RUNTIMES, runtimeBin } = (await import(builds)) as Runtimes;

const CORPUS_FILE = "transformers-gpt2-tiny-capp.safetensors";
const distMissing = existsSync(join(repoRoot, "dist", "node.js")) ? undefined : "dist/ is not built (npm run build)";
// Inside the checkout (test-artifacts/ is ignored): Deno resolves the package's own imports (aws4fetch) for scripts
// within the project that has them, as a user's project has them after installing the package.
mkdirSync(join(repoRoot, "test-artifacts"), { recursive: true });
const work = mkdtempSync(join(repoRoot, "test-artifacts", "runtimes-"));
after(() => rmSync(work, { recursive: true, force: true }));

/** Serves the corpus file with Range requests, on the loopback only. */
let server: Server | undefined;
let url = "";
before(async () => {
  if (!corpusAvailable) return;
  const bytes = readFileSync(join(corpusDir, CORPUS_FILE));
  server = createServer((request, response) => {
    const range = /^bytes=(\d+)-(\d*)$/.exec(request.headers.range ?? "");
    if (!range) {
      response.writeHead(200, { "content-length": bytes.length, "accept-ranges": "bytes" });
      response.end(bytes);
      return;
    }
    const start = Number(range[1]);
    const end = Math.min(range[2] ? Number(range[2]) : bytes.length - 1, bytes.length - 1);
    response.writeHead(206, {
      "content-length": end - start + 1,
      "content-range": `bytes ${start}-${end}/${bytes.length}`,
      "accept-ranges": "bytes",
      etag: '"corpus"',
    });
    response.end(bytes.subarray(start, end + 1));
  });
  await new Promise<void>((done) => server!.listen(0, "127.0.0.1", done));
  const address = server.address();
  url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/${CORPUS_FILE}`;
});
after(() => server?.close());

/** Run by each runtime: prints one JSON line of what it saw. */
function probe(): string {
  const entry = pathToFileURL(join(repoRoot, "dist", "node.js")).href;
  const core = pathToFileURL(join(repoRoot, "dist", "index.js")).href;
  const bundled = pathToFileURL(join(repoRoot, "dist", "lib", "node.js")).href;
  return `
const lib = await import(${JSON.stringify(entry)});
const core = await import(${JSON.stringify(core)});
const { createHash } = await import("node:crypto");
const { readFileSync } = await import("node:fs");
const [file, out, url] = process.argv.slice(-3);
const digest = (bytes) => createHash("sha256").update(bytes).digest("hex");
const opened = lib.openFile(file);
const names = [...opened.keys()];
const first = opened.getTensor(names[0]);
const backend = opened.backend;
const loaded = lib.loadFile(file);
lib.saveFile(out, loaded, Object.fromEntries(opened.metadata() ?? []));
opened.close();
const again = lib.loadFile(out, { backend: "pread" });
const same = names.every((n) => digest(again.get(n).data) === digest(loaded.get(n).data));
const remote = await lib.open(url);
const remoteNames = [...remote.keys()];
const remoteFirst = await remote.getTensor(names[0]);
await remote.close?.();
const fromCore = core.deserialize(readFileSync(out)).tensors.size;
// The bundle users import: a function loaded on first call (scripts/esbuild-lazy.mjs, a require() of an ES module)
// runs, and its error is the entry's SafetensorError class.
const bundle = await import(${JSON.stringify(bundled)});
let lazy = null;
try { bundle.parseMergeConfig({}); } catch (e) { lazy = e instanceof bundle.SafetensorError && e.code; }
console.log(JSON.stringify({ backend, names: names.length, firstShape: first.shape, same, outSha: digest(readFileSync(out)),
  remoteNames: remoteNames.length, remoteSame: digest(remoteFirst.data) === digest(loaded.get(names[0]).data), fromCore, lazy }));
`;
}

/** The README's ten-line example, as a user copies it (a TypeScript file; both runtimes run TypeScript). */
function readmeExample(): string {
  const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
  const code = /```ts\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf("## In ten lines")))?.[1] ?? "";
  assert.ok(code.includes('from "safetensors-ts"'), "README's example not found");
  return code.replaceAll('"safetensors-ts"', JSON.stringify(pathToFileURL(join(repoRoot, "dist", "node.js")).href));
}

/** Asynchronous, so that the HTTP server above answers from this process meanwhile. */
async function spawnAsync(
  command: string,
  args: readonly string[],
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, args, { cwd: repoRoot, env: { ...process.env, NO_COLOR: "1" } });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => {
    stdout += chunk;
  });
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const timer = setTimeout(() => child.kill(), 120_000);
  const status = await new Promise<number | null>((done) => {
    child.on("error", (error) => {
      stderr += error.message;
      done(null);
    });
    child.on("close", done);
  });
  clearTimeout(timer);
  return { status, stdout, stderr };
}

function node(args: readonly string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [join(repoRoot, "bin", "safetensors.js"), ...args], { encoding: "utf8" });
}

for (const { name } of RUNTIMES) {
  const found = runtimeBin(name);
  const onPath = spawnSync(name, ["--version"], { encoding: "utf8" }).status === 0 ? name : undefined;
  const bin = found.missing ? onPath : found.bin;
  const missing = bin ? undefined : `${found.missing} and no ${name} on PATH (node scripts/node-builds.mjs runtimes)`;
  const skip = missing ?? distMissing ?? (corpusAvailable ? undefined : corpusMissingReason);
  if (skip) console.error(`\n!!! ${name} tests are SKIPPED: ${skip} !!!\n`);

  describe(`${name}`, { skip }, () => {
    // The working directory is the checkout's, where Deno finds package.json and node_modules (as in a project that
    // installed the package).
    const run = (args: readonly string[]) => spawnAsync(bin!, name === "deno" ? ["run", "-A", ...args] : args);

    test("Node entry and core import; openFile, loadFile, saveFile round-trip a corpus file; open(url) over HTTP", async () => {
      const script = join(work, `${name}-probe.mjs`);
      writeFileSync(script, probe());
      const out = join(work, `${name}-out.safetensors`);
      const r = await run([script, join(corpusDir, CORPUS_FILE), out, url]);
      assert.equal(r.status, 0, r.stderr);
      const seen = JSON.parse(r.stdout.trim().split("\n").pop()!);
      assert.equal(seen.same, true);
      assert.equal(seen.remoteSame, true);
      assert.equal(seen.remoteNames, seen.names);
      assert.equal(seen.fromCore, seen.names);
      assert.equal(seen.lazy, "InvalidMergeConfig");
      // Bun loads the addon (mmap); Deno's descriptors are not the OS's, so it reads with pread (doctor says why).
      assert.equal(seen.backend, name === "bun" ? "mmap" : "pread");
      // The same bytes as Node's saveFile writes.
      const ours = join(work, `${name}-node.safetensors`);
      const nodeProbe = join(work, `${name}-node-probe.mjs`);
      writeFileSync(nodeProbe, probe());
      const probeNode = await spawnAsync(process.execPath, [nodeProbe, join(corpusDir, CORPUS_FILE), ours, url]);
      assert.equal(probeNode.status, 0, probeNode.stderr);
      assert.equal(seen.outSha, createHash("sha256").update(readFileSync(ours)).digest("hex"));
    });

    test("the README's ten-line example runs", async () => {
      const values = Array.from({ length: 64 * 256 }, (_, i) => (i % 97) / 8);
      const dir = mkdtempSync(join(work, `${name}-readme-`));
      saveFile(
        join(dir, "model.safetensors"),
        {
          "lm_head.weight": Tensor.fromFloat32("BF16", [64, 256], values),
          "model.embed_tokens.weight": Tensor.fromFloat32("F16", [64, 256], values),
        },
        { format: "pt" },
      );
      writeFileSync(join(dir, "example.ts"), readmeExample());
      // In the example's own folder, as the user runs it (relative paths), the runtime started from the checkout.
      const start = join(dir, "start.mjs");
      writeFileSync(start, `process.chdir(${JSON.stringify(dir)});\nawait import("./example.ts");\n`);
      const r = await run([start]);
      assert.equal(r.status, 0, r.stderr);
      assert.match(r.stdout, /F16 \[ 8, 256 \]/);
      assert.ok(statSync(join(dir, "rows.safetensors")).size > 8);
    });

    test("CLI: inspect --json and validate print what Node's do; doctor names the backend and why", async () => {
      const cli = join(repoRoot, "bin", "safetensors.js");
      for (const args of [
        ["inspect", join(corpusDir, CORPUS_FILE), "--json"],
        ["validate", join(corpusDir, CORPUS_FILE)],
        ["validate", join(corpusDir, "FAIL-duplicate-keys-in-header.safetensors")],
      ]) {
        const theirs = await run([cli, ...args]);
        const ours = node(args);
        assert.deepEqual(
          [theirs.status, theirs.stdout],
          [ours.status, ours.stdout],
          `${args.join(" ")}: ${theirs.stderr}`,
        );
      }
      const doctor = await run([cli, "doctor"]);
      assert.equal(doctor.status, 0, doctor.stderr);
      assert.match(doctor.stdout, new RegExp(`^${name} `));
      if (name === "bun") {
        assert.match(doctor.stdout, /native addon: loaded from .*/);
        assert.match(doctor.stdout, /mapped views: counted as external memory .*JavaScriptCore/);
      } else {
        assert.match(doctor.stdout, /native addon: not available \(Deno .*descriptors are not the OS's/);
      }
    });
  });
}
