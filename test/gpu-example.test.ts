/**
 * examples/gpu-matvec.html in headless Chromium with WebGPU (SwiftShader): the page loads a weight of the example
 * checkpoint into the GPU, multiplies it by a vector in a compute shader, and shows the product beside the CPU's
 * from the file; the two must agree. The page imports the built package (dist/): skipped, saying why, without it,
 * Chromium or nginx.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { launchChromium, WEBGPU_ARGS } from "./helpers/chromium.js";
import { repoRoot } from "./helpers/corpus.js";
import { gpuPageMissing } from "./helpers/gpu-page.js";
import { startNginx } from "./helpers/nginx.js";

const dist = path.join(repoRoot, "dist");
const skip =
  gpuPageMissing ||
  (!fs.existsSync(path.join(dist, "gpu", "load.js")) &&
    "dist/ has no gpu/ build (npm run build): example test skipped");

test("the GPU example page multiplies a loaded weight on the GPU and agrees with the CPU", {
  skip,
  timeout: 120_000,
}, async () => {
  const nginx = (await startNginx({ "/examples/": path.join(repoRoot, "examples"), "/dist/": dist }))!;
  const context = await launchChromium({ args: WEBGPU_ARGS });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(String(error)));
    await page.goto(`${nginx.url}/examples/gpu-matvec.html`);
    await page.waitForFunction(
      "document.body.dataset.worst !== undefined || document.getElementById('status').className === 'bad'",
      undefined,
      { timeout: 60_000 },
    );
    const status = await page.textContent("#status");
    assert.deepEqual(errors, []);
    assert.match(status!, /lm_head\.weight: BF16 \[256, 64\] loaded to the GPU as F32/);
    assert.match(status!, /they agree/);
    const worst = Number(await page.evaluate("document.body.dataset.worst"));
    assert.ok(worst <= 1e-5, `largest relative difference ${worst}`);
    assert.equal(await page.locator("#result tbody tr").count(), 16);
    if (process.env.SAFETENSORS_SCREENSHOTS)
      await page.screenshot({ path: process.env.SAFETENSORS_SCREENSHOTS, fullPage: true });
  } finally {
    await context.dispose();
    await nginx.stop();
  }
});
