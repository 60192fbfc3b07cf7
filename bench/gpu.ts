/**
 * `npm run bench:gpu`: the 2.37 GiB bench checkpoint from a local nginx into WebGPU buffers in headless Chromium
 * (SwiftShader), ours (`loadToGPU` from the built package, dist/) beside the naive loader every page writes first
 * (`fetch` → `arrayBuffer()` → `writeBuffer` per tensor), in the same run, interleaved: time to GPU (from the call to
 * the device's queue being done) and the renderer process's peak resident memory (VmHWM: each load runs in a fresh
 * browser process). Rows:
 *
 * - `idle page`: the page with the library and a device, loading nothing (the floor of the renderer's memory);
 * - `naive cold` / `naive again`: `fetch(url).arrayBuffer()` of the whole file, then `writeBuffer` per tensor, in a
 *   fresh profile, then the same profile again (the browser's HTTP cache may serve). Chromium refuses a body over
 *   its ArrayBuffer limit (~2 GiB): for the 2.37 GiB checkpoint it fails, as the users report;
 * - `naive per tensor`: the same within that limit: one Range request per tensor, `arrayBuffer()`, `writeBuffer`;
 * - `ours cold`: no cache; `ours cold+cache`: a fresh OPFS cache filled while loading; `ours from cache`: the next
 *   visit, served from that cache (nginx's log counts the bytes it still sent);
 * - `fetch only`: the bytes fetched as `loadToGPU` fetches them, nothing written to the GPU (what fetching costs).
 *
 * `--only method` measures the write path instead: 1 GiB in 16 MiB tensors by `queue.writeBuffer` and by buffers
 * created `mappedAtCreation` (src/gpu/load.ts quotes the result).
 *
 * Heavy (several GiB through the browser): run it alone, under the bench lock on shared machines.
 */
import { execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs } from "node:util";
import { CHROMIUM, CHROMIUM_ARGS, killBrowser, WEBGPU_ARGS } from "../test/helpers/chromium.js";
import { startNginx } from "../test/helpers/nginx.js";
import { CHECKPOINT_NAME, REPO_DIR } from "./spec.js";

const { values: args } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    only: { type: "string", default: "load" },
    rows: {
      type: "string",
      default: "idle page,naive cold,naive again,naive per tensor,ours cold,ours cold+cache,ours from cache,fetch only",
    },
    dir: { type: "string" },
    json: { type: "string" },
    // Seconds one load may take before its browser is killed and the row counted as failed.
    timeout: { type: "string", default: "600" },
  },
});
const loadTimeoutMs = Number(args.timeout) * 1000;
const runs = Number(args.runs);
const dir = path.resolve(args.dir ?? process.env.SAFETENSORS_BENCH_DIR ?? path.join(REPO_DIR, "bench/out"));
const checkpoint = path.join(dir, CHECKPOINT_NAME);
/** loadToGPU's options in the `ours` rows (JSON), for trying other chunk sizes and concurrencies. */
const oursOptions = JSON.parse(process.env.GPU_BENCH_OPTIONS ?? "{}") as Record<string, unknown>;
/** openWeightCache's options in the cached rows (JSON), for trying other block sizes and pendingBlocks. */
const cacheOptions = JSON.parse(process.env.GPU_BENCH_CACHE_OPTIONS ?? "{}") as Record<string, unknown>;

/**
 * The page of one load: the library and a device, then the load, its result sent to the bench's report server (a
 * GET, so no CORS is involved). The browser is started on this page directly, with no DevTools protocol: driven by
 * playwright, the renderer's DevTools network agent keeps copies of response bodies for the inspector (up to its
 * ~200 MB buffer), which put 200-270 MiB into the renderer that no user's page has (600 MiB checkpoint, same load:
 * renderer peak 388 MiB under playwright, 198 MiB launched directly; `fetch` alone: 369 against 174 MiB).
 */
const page = (
  report: string,
  body: string,
  arg: unknown[],
) => `<!doctype html><meta charset="utf-8"><title>gpu bench</title>
<script type="module">
const report = (r) => fetch(${JSON.stringify(report)} + "?" + encodeURIComponent(JSON.stringify(r)), { mode: "no-cors" });
try {
  window.st = await import("/dist/index.js");
  const adapter = await navigator.gpu.requestAdapter();
  window.device = await adapter.requestDevice({ requiredLimits: {
    maxBufferSize: adapter.limits.maxBufferSize,
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize } });
  await report(await (${body})(...${JSON.stringify(arg)}));
} catch (e) {
  await report({ error: String(e && e.stack || e).slice(0, 500) });
}
</script>`;

/** In the page: one load; resolves to its milliseconds and how many tensors and bytes it placed. */
const LOADERS: Record<string, string> = {
  naive: `async (url) => {
    const t0 = performance.now();
    const ab = await (await fetch(url)).arrayBuffer();
    const n = Number(new DataView(ab).getBigUint64(0, true));
    const header = JSON.parse(new TextDecoder().decode(new Uint8Array(ab, 8, n)));
    let bytes = 0, tensors = 0;
    for (const [name, entry] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const [a, b] = entry.data_offsets;
      const buffer = device.createBuffer({ size: Math.max(4, Math.ceil((b - a) / 4) * 4),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
      device.queue.writeBuffer(buffer, 0, ab, 8 + n + a, b - a);
      bytes += b - a; tensors++;
    }
    await device.queue.onSubmittedWorkDone();
    return { ms: performance.now() - t0, bytes, tensors };
  }`,
  ours: `async (url, cached, options, cacheOptions) => {
    const cache = cached ? await st.openWeightCache(cacheOptions) : undefined;
    const t0 = performance.now();
    const map = await st.loadToGPU(device, url, { ...options, cache });
    const ms = performance.now() - t0;
    let bytes = 0;
    for (const t of map.values()) bytes += t.byteLength;
    return { ms, bytes, tensors: map.size };
  }`,
  idle: `async () => ({ ms: 0, bytes: 0, tensors: 0 })`,
  // The naive loader within Chrome's ArrayBuffer limit: one Range request per tensor, arrayBuffer(), writeBuffer.
  naiveTensors: `async (url) => {
    const t0 = performance.now();
    const prefix = await (await fetch(url, { headers: { Range: "bytes=0-7" } })).arrayBuffer();
    const n = Number(new DataView(prefix).getBigUint64(0, true));
    const head = await (await fetch(url, { headers: { Range: "bytes=8-" + (7 + n) } })).arrayBuffer();
    const header = JSON.parse(new TextDecoder().decode(head));
    let bytes = 0, tensors = 0;
    for (const [name, entry] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const [a, b] = entry.data_offsets;
      const data = await (await fetch(url, { headers: { Range: "bytes=" + (8 + n + a) + "-" + (7 + n + b) } })).arrayBuffer();
      const buffer = device.createBuffer({ size: Math.max(4, Math.ceil((b - a) / 4) * 4),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
      device.queue.writeBuffer(buffer, 0, data, 0, b - a);
      bytes += b - a; tensors++;
    }
    await device.queue.onSubmittedWorkDone();
    return { ms: performance.now() - t0, bytes, tensors };
  }`,
  // What fetching alone costs: 4 Range requests of 16 MiB in flight, read into reused buffers (BYOB), no GPU.
  fetchonly: `async (url, byob) => {
    const t0 = performance.now();
    const size = Number((await fetch(url, { headers: { Range: "bytes=0-0" } })).headers.get("Content-Range").split("/")[1]);
    const chunk = 16 << 20;
    let next = 0, bytes = 0;
    const work = async () => {
      let staging = new Uint8Array(chunk);
      while (next < size) {
        const start = next; next += chunk;
        const end = Math.min(size, start + chunk);
        const r = await fetch(url, { headers: { Range: "bytes=" + start + "-" + (end - 1) }, cache: "no-store" });
        if (byob) {
          const reader = r.body.getReader({ mode: "byob" });
          let buf = staging.buffer, off = 0;
          while (off < end - start) {
            const { value, done } = await reader.read(new Uint8Array(buf, off, end - start - off));
            if (done) break;
            buf = value.buffer; off += value.length;
          }
          staging = new Uint8Array(buf);
          bytes += off;
        } else {
          const reader = r.body.getReader();
          for (;;) { const { value, done } = await reader.read(); if (done) break; staging.set(value, 0); bytes += value.length; }
        }
      }
    };
    await Promise.all([work(), work(), work(), work()]);
    return { ms: performance.now() - t0, bytes, tensors: 0 };
  }`,
  method: `async (how) => {
    const size = 16 << 20, count = 64;
    const data = new Uint8Array(size);
    for (let i = 0; i < size; i += 4096) data[i] = i >>> 12;
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
    const t0 = performance.now();
    const buffers = [];
    for (let i = 0; i < count; i++) {
      if (how === "writeBuffer") {
        const buffer = device.createBuffer({ size, usage });
        device.queue.writeBuffer(buffer, 0, data);
        buffers.push(buffer);
        if (i % 4 === 3) await device.queue.onSubmittedWorkDone();
      } else {
        const buffer = device.createBuffer({ size, usage, mappedAtCreation: true });
        new Uint8Array(buffer.getMappedRange()).set(data);
        buffer.unmap();
        buffers.push(buffer);
        if (i % 4 === 3) await device.queue.onSubmittedWorkDone();
      }
    }
    await device.queue.onSubmittedWorkDone();
    const ms = performance.now() - t0;
    for (const b of buffers) b.destroy();
    return { ms, bytes: size * count, tensors: count };
  }`,
};

interface Sample {
  ms: number;
  bytes: number;
  tensors: number;
  rendererPeakMib: number;
  gpuProcessPeakMib: number | null;
  networkBytes?: number;
}

/** Descendants of the browser whose command line uses `profile`, with their `--type`. */
function chromiumProcesses(profile: string): { pid: number; type: string }[] {
  const all = fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p));
  const info = new Map<number, { ppid: number; cmd: string }>();
  for (const p of all) {
    try {
      const stat = fs.readFileSync(`/proc/${p}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const cmd = fs.readFileSync(`/proc/${p}/cmdline`, "utf8").replace(/\0/g, " ");
      info.set(Number(p), { ppid, cmd });
    } catch {}
  }
  const root = [...info].find(([, v]) => v.cmd.includes(`--user-data-dir=${profile}`) && !v.cmd.includes("--type="));
  if (!root) return [];
  const out: { pid: number; type: string }[] = [];
  const visit = (pid: number) => {
    for (const [child, v] of info) {
      if (v.ppid !== pid) continue;
      out.push({ pid: child, type: /--type=(\S+)/.exec(v.cmd)?.[1] ?? "browser" });
      visit(child);
    }
  };
  visit(root[0]);
  return out;
}

function peakMib(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

/** Results pages send to `report` (one GET each). */
class Reports {
  private readonly waiting = new Map<string, (value: unknown) => void>();
  private readonly server = http.createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://x");
    this.waiting.get(url.pathname)?.(JSON.parse(decodeURIComponent(url.search.slice(1))));
    response.writeHead(204, { "access-control-allow-origin": "*" }).end();
  });
  url = "";
  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as import("node:net").AddressInfo).port}`;
  }
  wait(pathname: string): Promise<unknown> {
    return new Promise((resolve) => this.waiting.set(pathname, resolve));
  }
  close(): void {
    this.server.close();
  }
}

let loads = 0;
/** The folder nginx serves at /fx/ (the pages). */
let files = "";

async function load(
  profile: string,
  origin: string,
  reports: Reports,
  body: string,
  arg: unknown[],
): Promise<Omit<Sample, "networkBytes">> {
  const id = `/r${++loads}`;
  fs.writeFileSync(path.join(files, `${id.slice(1)}.html`), page(`${reports.url}${id}`, body, arg));
  const reported = reports.wait(id);
  const child = spawn(
    CHROMIUM,
    [...CHROMIUM_ARGS, ...WEBGPU_ARGS, `--user-data-dir=${profile}`, `${origin}/fx${id}.html`],
    { stdio: "ignore", detached: true },
  );
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let timer: NodeJS.Timeout | undefined;
  try {
    // A load that outlives the timeout fails its row, and its browser is killed below.
    const result = (await Promise.race([
      reported,
      exited.then(() => ({ error: "the browser exited" })),
      new Promise((resolve) => {
        timer = setTimeout(
          () => resolve({ error: `no result after ${args.timeout} s: browser killed` }),
          loadTimeoutMs,
        );
      }),
    ])) as { ms: number; bytes: number; tensors: number; error?: string };
    if (result.error) throw new Error(result.error);
    const processes = chromiumProcesses(profile);
    const renderers = processes.filter((p) => p.type === "renderer").map((p) => peakMib(p.pid));
    const gpu = processes.filter((p) => p.type === "gpu-process").map((p) => peakMib(p.pid));
    return {
      ...result,
      rendererPeakMib: Math.max(...renderers),
      gpuProcessPeakMib: gpu.length ? Math.max(...gpu) : null,
    };
  } finally {
    clearTimeout(timer);
    // SIGTERM first: Chromium shuts down in order and keeps what the page stored (the OPFS cache the next row reads).
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, "SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    killBrowser(profile);
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {}
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main(): Promise<void> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}`);
  if (!fs.existsSync(path.join(REPO_DIR, "dist/index.js"))) throw new Error("dist/ missing: npm run build first");
  const method = args.only === "method";
  if (!method && !fs.existsSync(checkpoint)) {
    fs.mkdirSync(dir, { recursive: true });
    console.log(`building ${checkpoint}`);
    execFileSync(process.execPath, [path.join(REPO_DIR, "bench/out/js/bench/checkpoint.js"), "build", checkpoint], {
      stdio: "inherit",
    });
  }
  const nginx = await startNginx({ "/data/": dir, "/dist/": path.join(REPO_DIR, "dist") });
  if (!nginx) throw new Error("nginx not installed");
  files = nginx.files;
  const reports = new Reports();
  await reports.start();
  const url = `${nginx.url}/data/${CHECKPOINT_NAME}`;
  const samples = new Map<string, Sample[]>();
  const failures: string[] = [];
  const add = (row: string, sample: Sample) => {
    samples.set(row, [...(samples.get(row) ?? []), sample]);
    console.log(
      `${row.padEnd(18)} ${(sample.ms / 1000).toFixed(2).padStart(7)} s  renderer peak ${sample.rendererPeakMib.toFixed(0).padStart(5)} MiB` +
        `  gpu process peak ${sample.gpuProcessPeakMib?.toFixed(0) ?? "-"} MiB  ${sample.tensors} tensors, ${(sample.bytes / 2 ** 30).toFixed(2)} GiB` +
        (sample.networkBytes === undefined ? "" : `  network ${(sample.networkBytes / 2 ** 20).toFixed(1)} MiB`),
    );
  };
  const profiles: string[] = [];
  const fresh = () => {
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), "st-gpu-bench-"));
    profiles.push(profile);
    return profile;
  };
  const network = async () => {
    const log = (await nginx.log()).filter((e) => e.path.startsWith("/data/"));
    const kinds = new Map<string, number>();
    for (const e of log) {
      const [a, b] = (e.range ?? "bytes=0-0").slice(6).split("-").map(Number);
      const key = `${e.status} asked ${(((b ?? 0) - (a ?? 0) + 1) / 2 ** 20).toFixed(1)} MiB sent ${(e.bytes / 2 ** 20).toFixed(1)} MiB`;
      kinds.set(key, (kinds.get(key) ?? 0) + 1);
    }
    if (process.env.GPU_BENCH_REQUESTS) console.log([...kinds].map(([k, n]) => `  ${n} x ${k}`).join("\n"));
    return log.reduce((a, e) => a + e.bytes, 0);
  };
  const once = async (row: string, profile: string, body: string, arg: unknown[]) => {
    await nginx.clearLog();
    try {
      const sample = await load(profile, nginx.url, reports, body, arg);
      add(row, { ...sample, networkBytes: await network() });
    } catch (error) {
      failures.push(`${row}: ${(error as Error).message.split("\n")[0]}`);
      console.log(`${row.padEnd(18)} FAILED: ${failures[failures.length - 1]}`);
    }
  };
  try {
    console.log(
      `load: ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")}`,
    );
    for (let run = 0; run < runs; run++) {
      if (method) {
        for (const how of ["writeBuffer", "mappedAtCreation"]) await once(how, fresh(), LOADERS.method!, [how]);
        continue;
      }
      const rows = new Set(args.rows.split(","));
      const naive = fresh();
      const cached = fresh();
      const plan: [string, string, string, unknown[]][] = [
        ["idle page", fresh(), LOADERS.idle!, []],
        ["naive cold", naive, LOADERS.naive!, [url]],
        ["naive again", naive, LOADERS.naive!, [url]],
        ["ours cold", fresh(), LOADERS.ours!, [url, false, oursOptions]],
        ["ours cold+cache", cached, LOADERS.ours!, [url, true, oursOptions, cacheOptions]],
        ["ours from cache", cached, LOADERS.ours!, [url, true, oursOptions, cacheOptions]],
        ["naive per tensor", fresh(), LOADERS.naiveTensors!, [url]],
        ["fetch only", fresh(), LOADERS.fetchonly!, [url, true]],
      ];
      for (const [row, profile, body, arg] of plan) if (rows.has(row)) await once(row, profile, body, arg);
      for (const p of profiles.splice(0)) fs.rmSync(p, { recursive: true, force: true });
    }
    console.log(
      `load: ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")}`,
    );
    console.log("\nmedians:");
    const summary: Record<string, { ms: number; rendererPeakMib: number; networkMib: number }> = {};
    for (const [row, list] of samples) {
      summary[row] = {
        ms: median(list.map((s) => s.ms)),
        rendererPeakMib: median(list.map((s) => s.rendererPeakMib)),
        networkMib: median(list.map((s) => (s.networkBytes ?? 0) / 2 ** 20)),
      };
      console.log(
        `${row.padEnd(18)} ${(summary[row]!.ms / 1000).toFixed(2).padStart(7)} s  renderer peak ${summary[row]!.rendererPeakMib.toFixed(0).padStart(5)} MiB  network ${summary[row]!.networkMib.toFixed(1)} MiB`,
      );
    }
    for (const failure of failures) console.log(`failed: ${failure}`);
    if (args.json) {
      fs.writeFileSync(args.json, JSON.stringify({ summary, failures, samples: Object.fromEntries(samples) }, null, 2));
    }
  } finally {
    for (const p of profiles) fs.rmSync(p, { recursive: true, force: true });
    reports.close();
    await nginx.stop();
  }
}

await main();
