/**
 * A page with WebGPU for tests: the core bundled for browsers (src/index.ts by esbuild) and served by a private
 * nginx with the test's files, opened in headless Chromium on SwiftShader, with a device and read-back helpers on
 * `window`. `gpuPageMissing` says why there is none (no Chromium, no nginx).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Page } from "playwright-core";
import { bundleCore } from "./bundle.js";
import { chromiumMissing, launchChromium, WEBGPU_ARGS } from "./chromium.js";
import { type Nginx, nginxBinary, nginxMissingReason, startNginx } from "./nginx.js";

export const gpuPageMissing: string | false = chromiumMissing || (nginxBinary === null && nginxMissingReason);

/**
 * In the page: `window.st` (the library), `window.device` (all of the adapter's buffer limits), `readBack(buffer)`
 * (its bytes), `sha256(bytes)` (hex), `tensorDigests(map)` (per tensor: dtype, shape, byteLength, size, sha256 of the
 * data bytes, whether the padding is zeros; parts for split tensors).
 */
const HELPERS = `
window.st = await import("/fx/safetensors.js");
const adapter = await navigator.gpu.requestAdapter();
window.device = await adapter.requestDevice({ requiredLimits: {
  maxBufferSize: adapter.limits.maxBufferSize,
  maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
} });
window.readBack = async (buffer) => {
  const copy = device.createBuffer({ size: buffer.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, copy, 0, buffer.size);
  device.queue.submit([encoder.finish()]);
  await copy.mapAsync(GPUMapMode.READ);
  const bytes = new Uint8Array(copy.getMappedRange().slice(0));
  copy.destroy();
  return bytes;
};
window.sha256 = async (bytes) =>
  Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)), (b) => b.toString(16).padStart(2, "0")).join("");
const digestOne = async (buffer, byteLength) => {
  const bytes = await readBack(buffer);
  return { size: buffer.size, sha256: await sha256(bytes.subarray(0, byteLength)),
    zeroPadding: bytes.subarray(byteLength).every((b) => b === 0) };
};
window.tensorDigests = async (map) => {
  const out = [];
  for (const [name, t] of map) {
    const entry = { name, dtype: t.dtype, sourceDtype: t.sourceDtype, shape: [...t.shape], byteLength: t.byteLength };
    if (t.buffer) Object.assign(entry, await digestOne(t.buffer, t.byteLength));
    else entry.parts = await Promise.all(t.buffers.map(async (p) =>
      ({ rows: [...p.rows], shape: [...p.shape], ...(await digestOne(p.buffer, p.byteLength)) })));
    out.push(entry);
  }
  return out;
};
window.ready = true;
`;

/** How long one `run` may take before it fails with what the page said (tests allow 120 s for several calls). */
const RUN_TIMEOUT = 90_000;

export interface GpuPage {
  readonly nginx: Nginx;
  readonly page: Page;
  /** Run `body` (the text of an async function of `arg`) in the page. */
  run<T>(body: string, arg?: unknown): Promise<T>;
  /** Open the page again (a reload: what was in memory is gone, OPFS stays). */
  reload(): Promise<void>;
  dispose(): Promise<void>;
}

export async function startGpuPage(locations: Record<string, string> = {}): Promise<GpuPage> {
  const nginx = (await startNginx(locations))!;
  let context: Awaited<ReturnType<typeof launchChromium>> | null = null;
  try {
    await bundleCore(path.join(nginx.files, "safetensors.js"));
    fs.writeFileSync(path.join(nginx.files, "helpers.js"), HELPERS);
    fs.writeFileSync(
      path.join(nginx.files, "index.html"),
      `<!doctype html><meta charset="utf-8"><title>gpu</title><input type="file" id="file"><script type="module" src="/fx/helpers.js"></script>`,
    );
    context = await launchChromium({ args: WEBGPU_ARGS });
    const page = context.pages()[0] ?? (await context.newPage());
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(String(error)));
    // The page's last words, for a call that never returns (a hung or crashed GPU process, a stuck read).
    const events: string[] = [];
    const note = (event: string) => events.push(event) > 40 && events.shift();
    page.on("console", (message) => note(`console.${message.type()}: ${message.text()}`));
    page.on("pageerror", (error) => note(`error: ${error}`));
    page.on("crash", () => note("the page crashed"));
    const open = async () => {
      await page.goto(`${nginx.url}/fx/index.html`);
      await page.waitForFunction("window.ready === true", undefined, { timeout: 30_000 }).catch(() => {
        throw new Error(`the test page did not start: ${errors.join("; ")}`);
      });
    };
    await open();
    const ctx = context;
    return {
      nginx,
      page,
      run: <T>(body: string, arg?: unknown) => {
        let timer: NodeJS.Timeout | undefined;
        const stuck = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const what = body.replace(/\s+/g, " ").slice(0, 120);
            reject(
              new Error(
                `a page call ran ${RUN_TIMEOUT / 1000} s: ${what}\n${events.join("\n") || "(the page said nothing)"}`,
              ),
            );
          }, RUN_TIMEOUT);
        });
        const call = page.evaluate(`(${body})(${JSON.stringify(arg ?? null)})`) as Promise<T>;
        return Promise.race([call, stuck]).finally(() => clearTimeout(timer));
      },
      reload: open,
      async dispose() {
        await ctx.dispose();
        await nginx.stop();
      },
    };
  } catch (error) {
    await context?.dispose();
    await nginx.stop();
    throw error;
  }
}
