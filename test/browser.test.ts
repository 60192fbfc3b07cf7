/**
 * The core in a real browser: the ESM browser build (src/index.ts bundled by esbuild) loaded by headless Chromium
 * from a private nginx, reading a file by URL (HTTP Range requests) and through a File from an <input type=file>,
 * checking values, and scanning and planning a torch checkpoint whose zip records are deflated (DecompressionStream,
 * no node:zlib). Skips, saying why, without Chromium or nginx. Never downloads a browser.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { serialize, Tensor } from "../src/node.js";
import { bundleCore } from "./helpers/bundle.js";
import { chromiumMissing, launchChromium } from "./helpers/chromium.js";
import { repoRoot } from "./helpers/corpus.js";
import { nginxBinary, nginxMissingReason, startNginx } from "./helpers/nginx.js";

/**
 * Runs in the page. A string, not a function: the test's own transpiler would add helpers (names for functions) that
 * do not exist in the page.
 */
const PAGE_SCRIPT = `async (url) => {
  const st = await import("/fx/safetensors.js");
  const read = async (input) => {
    const file = await st.open(input);
    const w = await file.getTensor("w");
    const part = await file.getSlice("w").get("1:3, ::2");
    const h = await file.getTensor("h");
    const out = {
      backend: file.backend,
      keys: file.keys(),
      metadata: Object.fromEntries(file.metadata() ?? []),
      w: Array.from(w.typed()),
      slice: { shape: part.shape, values: Array.from(part.typed()) },
      h: Array.from(h.toFloat32()),
    };
    await file.close();
    return out;
  };
  const picked = document.getElementById("file").files[0];
  // A torch checkpoint with deflated records: inflated by DecompressionStream (no node:zlib here), then scanned and planned.
  const pt = new st.MemorySource(new Uint8Array(await (await fetch("/fx/deflated.pt")).arrayBuffer()));
  const scan = await st.scanSourceAsync(pt);
  const plan = st.planConversion(await st.openContainerAsync(pt));
  const pickle = { verdict: scan.verdict, tensors: plan.tensors.map((t) => t.name).sort() };
  return { byUrl: await read(url), byFile: await read(picked), isFile: picked instanceof File, pickle };
}`;

const PAGE = `<!doctype html><meta charset="utf-8"><title>safetensors-ts</title><input type="file" id="file">`;

test("headless Chromium reads by URL and through a File", {
  skip: chromiumMissing || (nginxBinary === null && nginxMissingReason),
}, async () => {
  const nginx = (await startNginx({}))!;
  try {
    await bundleCore(path.join(nginx.files, "safetensors.js"));
    const values = Float32Array.from({ length: 24 }, (_, i) => i * 0.25 - 2);
    const bytes = serialize(
      new Map([
        ["w", Tensor.fromTypedArray("F32", [4, 6], values)],
        ["h", Tensor.fromFloat32("BF16", [3], [1.5, -2, 1024])],
      ]),
      { format: "pt" },
    );
    fs.writeFileSync(path.join(nginx.files, "model.safetensors"), bytes);
    fs.writeFileSync(path.join(nginx.files, "index.html"), PAGE);
    fs.copyFileSync(
      path.join(repoRoot, "test/fixtures/pickle/deflated-renamed.pt"),
      path.join(nginx.files, "deflated.pt"),
    );
    const context = await launchChromium();
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      const errors: string[] = [];
      page.on("pageerror", (error) => errors.push(String(error)));
      await page.goto(`${nginx.url}/fx/index.html`);
      await page.setInputFiles("#file", path.join(nginx.files, "model.safetensors"));
      await nginx.clearLog();
      const result: Record<string, unknown> = await page.evaluate(
        `(${PAGE_SCRIPT})(${JSON.stringify(`${nginx.url}/fx/model.safetensors`)})`,
      );
      assert.deepEqual(errors, []);
      const expected = {
        keys: ["h", "w"],
        metadata: { format: "pt" },
        w: Array.from(values),
        slice: {
          shape: [2, 3],
          values: [6, 8, 10, 12, 14, 16].map((i) => values[i]!), // rows 1-2, columns 0, 2, 4
        },
        h: [1.5, -2, 1024],
      };
      assert.deepEqual(result.byUrl, { backend: "http", ...expected });
      assert.deepEqual(result.byFile, { backend: "blob", ...expected });
      assert.equal(result.isFile, true);
      assert.deepEqual(result.pickle, {
        verdict: "safe",
        tensors: ["column", "expanded", "fortran", "offset", "strided", "transposed", "whole"],
      });
      // The URL read: the bundle, then one Range request covering this small file (tensors served from it).
      const ranged = (await nginx.log()).filter((e) => e.path === "/fx/model.safetensors");
      assert.equal(ranged.length, 1);
      assert.equal(ranged[0]!.status, 206);
      assert.equal(ranged[0]!.bytes, bytes.length);
    } finally {
      await context.dispose();
    }
  } finally {
    await nginx.stop();
  }
});
