/**
 * `safetensors view`'s server: loopback by default, non-loopback refused unless explicit, traversal and other
 * paths refused, DNS-rebinding Host names refused; its API equals `inspect --json` on the kohya LoRA, the 6-shard
 * set and a URL served by a local HTTP server; its histograms equal numpy's on the same tensors.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { isLoopback, openViewTarget, startViewServer, staticFile, type ViewServer } from "../src/view/node-server.js";
import { cliProcess } from "./helpers/cli.js";
import { corpusAvailable, corpusDir, corpusMissingReason } from "./helpers/corpus.js";
import { startEdgeServer } from "./helpers/edge-server.js";
import { referenceMissingReason, referencePython } from "./helpers/reference.js";
import { cli } from "./helpers/run-cli.js";

const KOHYA = path.join(corpusDir, "kohya-lycoris-lokr-smart-falcon.safetensors");
const SHARDED = path.join(corpusDir, "julia-test-sharded-6");
const BIG = path.join(corpusDir, "diffusers-sd15-lora-attnproc.safetensors");
const skip = !corpusAvailable && corpusMissingReason;

/** A raw GET: the path exactly as given (no client-side normalization), optional Host and method. */
function request(
  base: string,
  target: string,
  options: { method?: string; host?: string } = {},
): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: target,
        method: options.method ?? "GET",
        headers: options.host ? { Host: options.host } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString("utf8"), headers: res.headers }),
        );
      },
    );
    req.on("error", reject);
    req.end();
  });
}

async function getJson<T>(base: string, target: string): Promise<T> {
  const res = await request(base, target);
  assert.equal(res.status, 200, `${target}: ${res.body.slice(0, 300)}`);
  return JSON.parse(res.body) as T;
}

async function inspectJson(input: string): Promise<Record<string, unknown>> {
  const out = await cli("inspect", "--json", input);
  assert.equal(out.code, 0, out.stderr);
  return JSON.parse(out.stdout) as Record<string, unknown>;
}

function assertCarries(summary: Record<string, unknown>, expected: Record<string, unknown>, what: string): void {
  for (const key of Object.keys(expected)) assert.deepEqual(summary[key], expected[key], `${what}: ${key}`);
}

interface Report {
  name: string;
  dtype: string;
  shape: number[];
  byte_range: [number, number];
  sampled: unknown;
  stats: { min: number; max: number; mean: number; std: number; nan: number; inf: number; zeros: number };
  histogram: { bins: number; edges: number[]; counts: number[] };
  heatmap?: { rows: number; cols: number; values: (number | null)[] } | null;
}

type Summary = Record<string, unknown> & {
  tensor_index: { name: string; dtype: string; shape: number[]; byte_range: [number, number]; file: number }[];
  placement: { file: string | null }[];
};

test("hosts: loopback names are recognised; other addresses need allowNonLoopback", async () => {
  for (const host of ["127.0.0.1", "127.3.4.5", "localhost", "::1", "[::1]"]) assert.ok(isLoopback(host), host);
  for (const host of ["0.0.0.0", "192.168.1.2", "::", "example.org", "127.0.0.1.example.org"]) {
    assert.ok(!isLoopback(host), host);
    await assert.rejects(startViewServer({ error: new Error("x") }, { host }), { code: "InvalidOption" });
  }
  await assert.rejects(startViewServer({ error: new Error("x") }, { port: 70000 }), { code: "InvalidOption" });
});

test("the CLI binds 127.0.0.1 by default and prints the URL", { skip }, async () => {
  const child = cliProcess(["view", KOHYA, "--json"]);
  try {
    const line = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (c: Buffer) => {
        out += c.toString();
        if (out.includes("\n")) resolve(out.split("\n")[0]!);
      });
      child.on("exit", (code) => reject(new Error(`exited with ${code}`)));
    });
    const started = JSON.parse(line) as { url: string; host: string; port: number };
    assert.equal(started.host, "127.0.0.1");
    assert.match(started.url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
    const summary = await getJson<Summary>(started.url, "/api/summary");
    assertCarries(summary, await inspectJson(KOHYA), "kohya via the CLI");
    // The built page (npm run build), or the page saying to build it: HTML either way.
    const page = await request(started.url, "/");
    assert.equal(page.status, 200);
    assert.match(String(page.headers["content-type"]), /^text\/html/);
    assert.match(page.body, /safetensors (inspector|view)/);
  } finally {
    child.kill("SIGTERM");
  }
  const code = await new Promise((resolve) => child.on("exit", resolve));
  assert.equal(code, 0);
});

describe("serving only the page and the API", { skip }, () => {
  let server: ViewServer;
  let root: string;
  let outside: string;
  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), "view-static-"));
    outside = fs.mkdtempSync(path.join(os.tmpdir(), "view-outside-"));
    const page = path.join(root, "page");
    fs.mkdirSync(path.join(page, "assets"), { recursive: true });
    fs.writeFileSync(path.join(page, "index.html"), "<!doctype html><title>page</title>");
    fs.writeFileSync(path.join(page, "assets", "app.js"), "console.log(1)");
    fs.writeFileSync(path.join(root, "secret.txt"), "secret");
    fs.writeFileSync(path.join(outside, "secret.txt"), "secret");
    fs.symlinkSync(path.join(outside, "secret.txt"), path.join(page, "assets", "link.txt"));
    fs.symlinkSync(outside, path.join(page, "assets", "dir"));
    server = await startViewServer(await openViewTarget(KOHYA), { staticDir: page });
  });
  after(async () => {
    await server?.close();
    fs.rmSync(root, { recursive: true, force: true });
    fs.rmSync(outside, { recursive: true, force: true });
  });

  test("the page and its assets are served", async () => {
    assert.equal((await request(server.url, "/")).body, "<!doctype html><title>page</title>");
    const js = await request(server.url, "/assets/app.js");
    assert.equal(js.status, 200);
    assert.match(String(js.headers["content-type"]), /javascript/);
    assert.equal(js.headers["x-content-type-options"], "nosniff");
  });

  test("traversal in every spelling, symlinks out and unknown paths are 404", async () => {
    const refused = [
      "/../secret.txt",
      "/assets/../../secret.txt",
      "/%2e%2e/secret.txt",
      "/%2E%2E/secret.txt",
      "/assets/%2e%2e/%2e%2e/secret.txt",
      "/assets/..%2f..%2fsecret.txt",
      "/..%2fsecret.txt",
      "/%252e%252e/secret.txt",
      "/..\\secret.txt",
      "/assets\\..\\..\\secret.txt",
      "/assets/%5c..%5c..%5csecret.txt",
      "/index.html%00.js",
      "/assets/link.txt",
      "/assets/dir/secret.txt",
      "/assets",
      "/nope.html",
      "/api/nope",
      "/api/../../secret.txt",
      `/${path.join(outside, "secret.txt")}`,
      "//etc/passwd",
    ];
    for (const target of refused) {
      const res = await request(server.url, target);
      assert.equal(res.status, 404, `${target} answered ${res.status}`);
      assert.ok(!res.body.includes("secret"), target);
    }
    assert.equal(staticFile(path.join(root, "page"), "/assets/%2e%2e/index.html"), null);
  });

  test("only GET and HEAD; Host names other than IP literals and localhost are refused", async () => {
    for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
      const res = await request(server.url, "/api/summary", { method });
      assert.equal(res.status, 405, method);
      assert.equal(res.headers.allow, "GET, HEAD");
    }
    const port = new URL(server.url).port;
    for (const host of [`evil.example:${port}`, `127.0.0.1.nip.io:${port}`, "attacker.test"]) {
      assert.equal((await request(server.url, "/api/summary", { host })).status, 421, host);
    }
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]) {
      assert.equal((await request(server.url, "/api/summary", { host })).status, 200, host);
    }
  });

  test("API errors: missing or unknown tensor, bad bins", async () => {
    assert.equal((await request(server.url, "/api/tensor")).status, 400);
    const unknown = await request(server.url, "/api/tensor?name=nope");
    assert.equal(unknown.status, 404);
    assert.equal((JSON.parse(unknown.body) as { error: { code: string } }).error.code, "TensorNotFound");
    const summary = await getJson<Summary>(server.url, "/api/summary");
    const name = encodeURIComponent(summary.tensor_index[0]!.name);
    // A mistyped name: the closest names, in the message and as data.
    const first = summary.tensor_index[0]!.name;
    const typo = `${first.slice(0, -2)}${first.at(-1)}${first.at(-2)}`;
    const mistyped = await request(server.url, `/api/tensor?name=${encodeURIComponent(typo)}`);
    assert.equal(mistyped.status, 404);
    const error = (JSON.parse(mistyped.body) as { error: { code: string; message: string; suggestions: string[] } })
      .error;
    assert.equal(error.code, "TensorNotFound");
    assert.ok(error.suggestions.includes(first), JSON.stringify(error));
    assert.ok(error.message.includes(`did you mean ${JSON.stringify(first)}`), error.message);
    for (const bins of ["0", "-1", "1e3", "abc", "100000"]) {
      const res = await request(server.url, `/api/tensor?name=${name}&bins=${bins}`);
      assert.equal(res.status, 400, bins);
      assert.equal((JSON.parse(res.body) as { error: { code: string } }).error.code, "InvalidOption");
    }
    assert.equal(await getJson(server.url, "/api/error"), null);
  });
});

/** numpy's view of tensors: np.histogram(finite.astype(float64), bins) and the stats, via the reference venv. */
function numpyReports(file: string, names: string[], bins: number) {
  const ref = referencePython()!;
  const script = `
import json, sys
import numpy as np
from safetensors import safe_open
out = {}
with safe_open(sys.argv[1], framework="numpy") as f:
    for name in json.loads(sys.argv[2]):
        x = f.get_tensor(name).astype(np.float64).ravel()
        finite = x[np.isfinite(x)]
        counts, edges = np.histogram(finite, bins=int(sys.argv[3]))
        out[name] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts],
                     "min": float(finite.min()), "max": float(finite.max()), "mean": float(finite.mean()),
                     "std": float(finite.std()), "nan": int(np.isnan(x).sum()), "inf": int(np.isinf(x).sum()),
                     "zeros": int((x == 0).sum())}
json.dump(out, sys.stdout)
`;
  const run = spawnSync(ref.python, ["-c", script, file, JSON.stringify(names), String(bins)], {
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout) as Record<string, Report["histogram"] & Report["stats"]>;
}

function assertMatchesNumpy(report: Report, expected: Report["histogram"] & Report["stats"], what: string): void {
  assert.deepEqual(report.histogram.edges, expected.edges, `${what}: edges`);
  assert.deepEqual(report.histogram.counts, expected.counts, `${what}: counts`);
  assert.ok(report.stats.min === expected.min && report.stats.max === expected.max, `${what}: min/max`);
  for (const key of ["mean", "std"] as const) {
    const tolerance = 1e-12 * Math.max(1, Math.abs(expected[key]));
    assert.ok(Math.abs(report.stats[key] - expected[key]) <= tolerance, `${what}: ${key}`);
  }
  assert.equal(report.stats.nan, expected.nan);
  assert.equal(report.stats.inf, expected.inf);
  assert.equal(report.stats.zeros, expected.zeros);
}

describe("the API's numbers", { skip }, () => {
  test("kohya LoRA: summary carries inspect --json; tensors read from their bytes; histograms equal numpy's", async (t) => {
    const server = await startViewServer(await openViewTarget(KOHYA));
    try {
      const summary = await getJson<Summary>(server.url, "/api/summary");
      const expected = await inspectJson(KOHYA);
      assertCarries(summary, expected, "kohya");
      const tensors = expected.tensors as { name: string; dtype: string; shape: number[]; data_offsets: number[] }[];
      const start = 8 + (expected.header_bytes as number);
      const picked = [tensors[0]!, tensors[1]!, tensors[Math.floor(tensors.length / 2)]!, tensors.at(-1)!];
      const reports = new Map<string, Report>();
      for (const tensor of picked) {
        const report = await getJson<Report>(
          server.url,
          `/api/tensor?name=${encodeURIComponent(tensor.name)}&bins=50&heatmap=8`,
        );
        assert.equal(report.dtype, tensor.dtype);
        assert.deepEqual(report.shape, tensor.shape);
        assert.deepEqual(report.byte_range, [start + tensor.data_offsets[0]!, start + tensor.data_offsets[1]!]);
        assert.equal(report.sampled, false);
        if (tensor.shape.length === 2) assert.ok(report.heatmap && report.heatmap.values.length > 0);
        else assert.equal(report.heatmap, null);
        reports.set(tensor.name, report);
      }
      if (!referencePython()) return t.skip(referenceMissingReason());
      const numpy = numpyReports(KOHYA, [...reports.keys()], 50);
      for (const [name, report] of reports) assertMatchesNumpy(report, numpy[name]!, name);
    } finally {
      await server.close();
    }
  });

  test("6-shard set: summary carries inspect --json; each tensor's shard and bytes; histograms equal numpy's", async (t) => {
    const server = await startViewServer(await openViewTarget(SHARDED));
    try {
      const summary = await getJson<Summary>(server.url, "/api/summary");
      const expected = await inspectJson(SHARDED);
      assertCarries(summary, expected, "6 shards");
      const shards = expected.shards as {
        file: string;
        header_bytes: number;
        tensors: { name: string; dtype: string; shape: number[]; data_offsets: number[] }[];
      }[];
      const checked: { file: string; name: string; report: Report }[] = [];
      for (const shard of shards) {
        for (const tensor of shard.tensors) {
          const entry = summary.tensor_index.find((e) => e.name === tensor.name)!;
          assert.equal(summary.placement[entry.file]!.file, shard.file);
          const report = await getJson<Report & { file: string }>(
            server.url,
            `/api/tensor?name=${encodeURIComponent(tensor.name)}&bins=7`,
          );
          assert.equal(report.file, shard.file);
          const start = 8 + shard.header_bytes;
          assert.deepEqual(report.byte_range, [start + tensor.data_offsets[0]!, start + tensor.data_offsets[1]!]);
          if (!["BF16", "C64", "F8_E4M3", "F8_E5M2", "BOOL"].includes(tensor.dtype) && tensor.shape.length > 0) {
            checked.push({ file: shard.file, name: tensor.name, report });
          }
        }
      }
      if (!referencePython()) return t.skip(referenceMissingReason());
      assert.ok(checked.length > 5, `${checked.length} tensors compared`);
      for (const file of new Set(checked.map((c) => c.file))) {
        const mine = checked.filter((c) => c.file === file);
        const numpy = numpyReports(
          path.join(SHARDED, file),
          mine.map((c) => c.name),
          7,
        );
        for (const { name, report } of mine) assertMatchesNumpy(report, numpy[name]!, name);
      }
    } finally {
      await server.close();
    }
  });

  test("URLs (http:// and hf:// on a local HTTP server, Range requests): the same numbers as the file itself", async () => {
    const edge = await startEdgeServer(
      new Map([
        ["/kohya.safetensors", { bytes: new Uint8Array(fs.readFileSync(KOHYA)) }],
        ["/big.safetensors", { bytes: new Uint8Array(fs.readFileSync(BIG)) }],
        ["/org/lora/resolve/main/kohya.safetensors", { bytes: new Uint8Array(fs.readFileSync(KOHYA)) }],
        ...fs
          .readdirSync(SHARDED)
          .map((f) => [`/ckpt/${f}`, { bytes: new Uint8Array(fs.readFileSync(path.join(SHARDED, f))) }] as const),
      ]),
    );
    const remote = await startViewServer(await openViewTarget(`${edge.url}/kohya.safetensors?sig=secret`));
    const local = await startViewServer(await openViewTarget(KOHYA));
    try {
      const summary = await getJson<Summary>(remote.url, "/api/summary");
      assert.equal(summary.source, `${edge.url}/kohya.safetensors`);
      assertCarries(summary, await inspectJson(`${edge.url}/kohya.safetensors`), "URL");
      assertCarries(summary, await inspectJson(KOHYA), "URL vs file");
      // The whole file (647 KB) came with the first 1 MiB read: tensors need no further request.
      const before = edge.requests.length;
      for (const entry of summary.tensor_index.slice(0, 20)) {
        const query = `/api/tensor?name=${encodeURIComponent(entry.name)}&bins=20&heatmap=4`;
        assert.deepEqual(await getJson<Report>(remote.url, query), await getJson<Report>(local.url, query));
      }
      assert.equal(edge.requests.length, before);

      // A 3.2 MB file: a tensor past the first MiB is read with Range requests for its bytes only.
      const bigRemote = await startViewServer(await openViewTarget(`${edge.url}/big.safetensors`));
      const bigLocal = await startViewServer(await openViewTarget(BIG));
      try {
        const big = await getJson<Summary>(bigRemote.url, "/api/summary");
        assertCarries(big, await inspectJson(BIG), "big URL vs file");
        const last = big.tensor_index.reduce((a, b) => (b.byte_range[0] > a.byte_range[0] ? b : a));
        assert.ok(last.byte_range[0] > 1 << 20);
        const start = edge.requests.length;
        const query = `/api/tensor?name=${encodeURIComponent(last.name)}&bins=33`;
        assert.deepEqual(await getJson<Report>(bigRemote.url, query), await getJson<Report>(bigLocal.url, query));
        const reads = edge.requests.slice(start);
        assert.ok(reads.length >= 1, "the tensor was fetched");
        for (const read of reads) {
          const [, from, to] = /^bytes=(\d+)-(\d+)$/.exec(read.range ?? "")!;
          assert.ok(Number(from) >= last.byte_range[0] - (64 << 10) && Number(to) < last.byte_range[1], read.range!);
        }
      } finally {
        await bigRemote.close();
        await bigLocal.close();
      }

      // hf:// resolves like the Hub against HF_ENDPOINT.
      const saved = process.env.HF_ENDPOINT;
      process.env.HF_ENDPOINT = edge.url;
      try {
        const hub = await startViewServer(await openViewTarget("hf://org/lora/kohya.safetensors"));
        try {
          const hubSummary = await getJson<Summary>(hub.url, "/api/summary");
          assert.equal(hubSummary.source, "hf://org/lora/kohya.safetensors");
          assertCarries(hubSummary, await inspectJson(KOHYA), "hf:// vs file");
        } finally {
          await hub.close();
        }
      } finally {
        if (saved === undefined) delete process.env.HF_ENDPOINT;
        else process.env.HF_ENDPOINT = saved;
      }

      const sharded = await startViewServer(await openViewTarget(`${edge.url}/ckpt/model.safetensors.index.json`));
      try {
        const shardSummary = await getJson<Summary>(sharded.url, "/api/summary");
        const fromDisk = await inspectJson(SHARDED);
        for (const key of ["parameters", "data_bytes", "warnings", "shards", "metadata"]) {
          assert.deepEqual(shardSummary[key], fromDisk[key], `remote index: ${key}`);
        }
      } finally {
        await sharded.close();
      }
    } finally {
      await remote.close();
      await local.close();
      await edge.close();
    }
  });

  test("sampling is said; invalid files answer with their error code", async () => {
    const server = await startViewServer(await openViewTarget(KOHYA), { maxSamples: 16 });
    try {
      const summary = await getJson<Summary>(server.url, "/api/summary");
      const big = summary.tensor_index.find((e) => e.shape.reduce((a, b) => a * b, 1) > 64)!;
      const report = await getJson<Report & { sampled: { elements: number; of: number } }>(
        server.url,
        `/api/tensor?name=${encodeURIComponent(big.name)}`,
      );
      assert.equal(report.sampled.elements, 16);
      assert.equal(
        report.sampled.of,
        big.shape.reduce((a, b) => a * b, 1),
      );
    } finally {
      await server.close();
    }
    const bad = path.join(corpusDir, "FAIL-duplicate-keys-in-header.safetensors");
    let error: unknown;
    try {
      await openViewTarget(bad);
    } catch (e) {
      error = e;
    }
    assert.equal((error as { code: string }).code, "DuplicateKey");
    const failed = await startViewServer({ error });
    try {
      const summary = await getJson<{ error: { code: string; message: string } }>(failed.url, "/api/summary");
      assert.equal(summary.error.code, "DuplicateKey");
      assert.deepEqual(await getJson(failed.url, "/api/error"), summary.error);
      assert.equal((await request(failed.url, "/api/tensor?name=x")).status, 422);
    } finally {
      await failed.close();
    }
  });
});
