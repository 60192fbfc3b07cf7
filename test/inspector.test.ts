/**
 * The web inspector (inspector/, built by scripts/build-inspector.mjs) in headless Chromium: served with an API,
 * and standalone with dropped files (one file, the corpus's 6-shard set, an invalid file, a synthetic 10k-tensor
 * header). Stats on the page are checked against values this test decodes with the library. Screenshots go to
 * test-artifacts/ (not committed). Skips, saying why, without Chromium or the corpus.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import type { Page } from "playwright-core";
import { openFile, serialize, Tensor } from "../src/node.js";
import { inspectJson } from "../src/view/inspect-format.js";
import { openViewTarget, startViewServer } from "../src/view/node-server.js";
import { chromiumMissing, launchChromium } from "./helpers/chromium.js";
import { corpusAvailable, corpusDir, corpusMissingReason, repoRoot } from "./helpers/corpus.js";

const GPT2 = path.join(corpusDir, "transformers-gpt2-tiny-capp.safetensors");
const KOHYA = path.join(corpusDir, "kohya-lycoris-lokr-smart-falcon.safetensors");
const SHARDS = path.join(corpusDir, "julia-test-sharded-6");
const INVALID = path.join(corpusDir, "FAIL-duplicate-keys-in-header.safetensors");
const ARTIFACTS = path.join(repoRoot, "test-artifacts");

const skip = chromiumMissing || (!corpusAvailable && corpusMissingReason);
if (skip) console.error(`\n!!! inspector browser tests are SKIPPED: ${skip} !!!\n`);

/** What the page should show for a tensor: computed here from the decoded values, in float64. */
function expectedStats(file: string, name: string) {
  using f = openFile(file);
  const v = f.getTensor(name).toFloat32();
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  let zeros = 0;
  for (const x of v) {
    min = Math.min(min, x);
    max = Math.max(max, x);
    sum += x;
    if (x === 0) zeros++;
  }
  const mean = sum / v.length;
  let sq = 0;
  for (const x of v) sq += (x - mean) ** 2;
  return { min, max, mean, std: Math.sqrt(sq / v.length), zeros, count: v.length };
}

async function shownStats(page: Page): Promise<Record<string, string>> {
  return page.$$eval("#detail [data-stat]", (rows) =>
    Object.fromEntries(rows.map((r) => [r.getAttribute("data-stat"), r.querySelector("td")?.textContent ?? ""])),
  );
}

function assertStats(shown: Record<string, string>, file: string, name: string): void {
  const e = expectedStats(file, name);
  // min and max are float32 values: shown to 6 significant digits, exactly.
  assert.equal(Number(shown.min), Number(e.min.toPrecision(6)), `min of ${name}`);
  assert.equal(Number(shown.max), Number(e.max.toPrecision(6)), `max of ${name}`);
  // mean and std depend on summation order: equal to 6 digits of their scale.
  const scale = Math.abs(e.mean) + e.std;
  assert.ok(Math.abs(Number(shown.mean) - e.mean) <= 1e-5 * scale, `mean of ${name}: ${shown.mean} vs ${e.mean}`);
  assert.ok(Math.abs(Number(shown.std) - e.std) <= 1e-5 * scale, `std of ${name}: ${shown.std} vs ${e.std}`);
  assert.equal(shown.zeros!.replace(/,/g, ""), String(e.zeros), `zeros of ${name}`);
  assert.equal(shown.elements!.replace(/,/g, ""), String(e.count));
}

/** The page's static files and nothing else: the standalone page, as any static server (or none) would serve it. */
function startStatic(root: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    const file = path.join(root, url.pathname === "/" ? "index.html" : path.normalize(url.pathname));
    if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      return res.writeHead(404).end("not found");
    }
    const type = file.endsWith(".html") ? "text/html" : file.endsWith(".css") ? "text/css" : "text/javascript";
    res.writeHead(200, { "content-type": type }).end(fs.readFileSync(file));
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}/`,
        close: () => new Promise((done) => server.close(() => done())),
      });
    });
  });
}

interface Served {
  url: string;
  close(): Promise<void>;
}

describe("web inspector in headless Chromium", { skip }, () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "st-inspector-"));
  /** The real `safetensors view` server (src/view/node-server.ts) over `input`, serving the page built here. */
  const serve = async (input: string | { error: unknown }): Promise<Served> => {
    const target = typeof input === "string" ? await openViewTarget(input) : input;
    const server = await startViewServer(target, { staticDir: out });
    return {
      url: server.url,
      async close() {
        await server.close();
        if ("close" in target && typeof target.close === "function") await target.close();
      },
    };
  };
  let context: Awaited<ReturnType<typeof launchChromium>>;
  let served: Served;
  let plain: Awaited<ReturnType<typeof startStatic>>;
  let page: Page;
  let errors: string[] = [];

  before(async () => {
    const built = spawnSync(process.execPath, [path.join(repoRoot, "scripts/build-inspector.mjs"), out], {
      encoding: "utf8",
    });
    assert.equal(built.status, 0, built.stderr + built.stdout);
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    served = await serve(GPT2);
    plain = await startStatic(out);
    context = await launchChromium({ viewport: { width: 1280, height: 800 } });
    page = context.pages()[0] ?? (await context.newPage());
    page.on("pageerror", (error) => errors.push(String(error)));
    page.on("console", (m) => {
      // A standalone page's probe of ./api/summary on a plain server is a 404 by design.
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(m.text());
    });
  });

  after(async () => {
    await context?.dispose();
    await served?.close();
    await plain?.close();
    fs.rmSync(out, { recursive: true, force: true });
  });

  const shot = (name: string) =>
    page.screenshot({ path: path.join(ARTIFACTS, `inspector-${name}.png`), fullPage: true });
  const ready = () => page.waitForSelector("body[data-ready=true]", { state: "attached" });
  const row = (key: string) => page.locator(`.tree-row[data-key="${key}"]`);
  const pick = async (file: string | string[]) => {
    await page.setInputFiles("#pick", file);
    await page.waitForSelector("#view:not([hidden]), #error:not([hidden])");
  };
  const detailShown = (name: string) =>
    page.waitForFunction(
      (n) =>
        document.querySelector("#detail .name")?.textContent === n && !!document.querySelector("#detail [data-stat]"),
      name,
    );

  test("served: summary, expand a layer, pick a tensor, stats as decoded here", async () => {
    errors = [];
    await page.goto(served.url);
    await ready();
    const cards = await page.$$eval("#cards dd", (dds) => dds.map((d) => d.textContent));
    assert.deepEqual(cards.slice(0, 3), ["927.5 KiB", "4,888", "52"]);
    using f = openFile(GPT2);
    const expected = JSON.parse(inspectJson(f.header));
    assert.equal(await page.getAttribute("#cards", "data-parameters"), String(expected.parameters));
    // Layers start folded: expand `transformer.h`'s layer 0, then its attention block.
    assert.equal(await row("transformer.h").getAttribute("aria-expanded"), "false");
    await row("transformer.h").click();
    assert.equal(await row("transformer.h").getAttribute("aria-expanded"), "true");
    assert.equal(await row("transformer.h.0").getAttribute("aria-expanded"), "false");
    await row("transformer.h.0").click();
    await row("transformer.h.0.attn").click();
    await row("transformer.h.0.attn.c_attn").click();
    const name = "transformer.h.0.attn.c_attn.weight";
    await row(name).click();
    await detailShown(name);
    assertStats(await shownStats(page), GPT2, name);
    const range = f.byteRange(name);
    const shown = await shownStats(page);
    assert.equal(
      shown["byte range"],
      `[${range.offset.toLocaleString("en")}, ${(range.offset + range.length).toLocaleString("en")})`,
    );
    assert.equal(await row(name).getAttribute("aria-selected"), "true");
    assert.ok(await page.isVisible("#heatmap"), "a 2-D tensor has a heat map");
    await shot("served-1280");
    assert.deepEqual(errors, []);
  });

  test("filter by name and by dtype", async () => {
    await page.fill("#filter", "c_proj.weight");
    await page.waitForFunction(() => document.querySelector("#tree-count")?.textContent?.startsWith("8 of 52"));
    // Filtered trees open fully: every match is a visible row.
    assert.equal(await page.locator('.tree-row[data-key$="c_proj.weight"]').count(), 8);
    await page.fill("#filter", "");
    await page.selectOption("#dtype-filter", "F32");
    await page.waitForFunction(() => document.querySelector("#tree-count")?.textContent === "52 of 52 tensors match");
    await page.selectOption("#dtype-filter", "");
  });

  test("keyboard: arrows, Right/Left, Enter, Home/End", async () => {
    await page.waitForFunction(() => document.querySelector("#tree-count")?.textContent === "52 tensors");
    await page.focus("#tree");
    const active = () =>
      page.evaluate(() => {
        const id = document.getElementById("tree")!.getAttribute("aria-activedescendant");
        return id ? document.getElementById(id)?.dataset.key : undefined;
      });
    await page.keyboard.press("Home");
    assert.equal(await active(), "transformer");
    await page.keyboard.press("ArrowDown");
    assert.equal(await active(), "transformer.h");
    await page.keyboard.press("ArrowRight"); // opens the layer stack
    assert.equal(await row("transformer.h").getAttribute("aria-expanded"), "true");
    await page.keyboard.press("ArrowRight"); // to its first child
    assert.equal(await active(), "transformer.h.0");
    await page.keyboard.press("ArrowRight"); // opens layer 0
    assert.equal(await row("transformer.h.0").getAttribute("aria-expanded"), "true");
    await page.keyboard.press("ArrowDown");
    assert.equal(await active(), "transformer.h.0.attn");
    await page.keyboard.press("ArrowLeft"); // to the parent
    assert.equal(await active(), "transformer.h.0");
    await page.keyboard.press("ArrowLeft"); // closes it
    assert.equal(await row("transformer.h.0").getAttribute("aria-expanded"), "false");
    await page.keyboard.press("End");
    const last = await page.evaluate(() => {
      const rows = Array.from(document.querySelectorAll<HTMLElement>(".tree-row"));
      return rows.sort((a, b) => Number(b.dataset.row) - Number(a.dataset.row))[0]!.dataset.key;
    });
    assert.equal(await active(), last);
    assert.ok(last, "End reached a row");
    await page.keyboard.press("Enter");
    await detailShown(last);
    assertStats(await shownStats(page), GPT2, last);
    assert.equal(await page.getAttribute("#tree", "role"), "tree");
    assert.equal(await row(last).getAttribute("role"), "treeitem");
    assert.equal(await row(last).getAttribute("aria-selected"), "true");
  });

  test("narrow window (400 px) stays readable", async () => {
    await page.setViewportSize({ width: 400, height: 800 });
    await page.waitForTimeout(100);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `page wider than the window by ${overflow} px`);
    await shot("served-400");
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  test("served: the 6-shard set's directory, placement and a tensor from its shard", async () => {
    const sharded = await serve(SHARDS);
    try {
      await page.goto(sharded.url);
      await ready();
      const shards = await page.$$eval("#shards tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));
      const index = JSON.parse(fs.readFileSync(path.join(SHARDS, "model.safetensors.index.json"), "utf8"));
      assert.deepEqual(shards, [...new Set(Object.values(index.weight_map as Record<string, string>))].sort());
      const [name, shard] = Object.entries(index.weight_map as Record<string, string>)[0]!;
      await page.fill("#filter", name);
      await page.waitForFunction(() =>
        / of 36 tensors match$/.test(document.querySelector("#tree-count")?.textContent ?? ""),
      );
      await row(name).click();
      await detailShown(name);
      const shown = await shownStats(page);
      assert.equal(shown.shard, shard);
      assertStats(shown, path.join(SHARDS, shard), name);
    } finally {
      await sharded.close();
    }
  });

  test("served: an invalid file's page shows its error code", async () => {
    const invalid = await serve(INVALID).catch((error: unknown) => serve({ error }));
    try {
      await page.goto(invalid.url);
      await ready();
      assert.equal(await page.textContent("#error .code"), "DuplicateKey");
      assert.ok(await page.isHidden("#view"));
    } finally {
      await invalid.close();
    }
  });

  test("standalone: a dropped file, stats computed in the page", async () => {
    errors = [];
    await page.goto(plain.url);
    await ready();
    assert.ok(await page.isVisible("#welcome"));
    const bytes = fs.readFileSync(GPT2).toString("base64");
    const transfer = await page.evaluateHandle((b64) => {
      const data = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([data], "gpt2.safetensors"));
      return dt;
    }, bytes);
    await page.dispatchEvent("body", "drop", { dataTransfer: transfer });
    await page.waitForSelector("#view:not([hidden])");
    assert.equal(await page.textContent("#source"), "gpt2.safetensors");
    await row("transformer.h").click();
    await row("transformer.h.3").click();
    await row("transformer.h.3.mlp").click();
    await row("transformer.h.3.mlp.c_fc").click();
    const name = "transformer.h.3.mlp.c_fc.weight";
    await row(name).click();
    await detailShown(name);
    assertStats(await shownStats(page), GPT2, name);
    assert.ok(await page.isVisible("#heatmap"));
    assert.deepEqual(errors, []);
  });

  test("standalone: kohya metadata as a table, JSON values collapsible, training facts", async () => {
    await pick(KOHYA);
    await page.waitForFunction(() => document.querySelector("#metadata-count")?.textContent === "(61 keys)");
    const facts = await page.$$eval("#facts [data-fact]", (pairs) =>
      Object.fromEntries(pairs.map((p) => [p.getAttribute("data-fact"), p.querySelector("dd")?.textContent])),
    );
    using f = openFile(KOHYA);
    assert.equal(facts.network_dim, f.metadata()!.get("ss_network_dim"));
    assert.equal(facts.network_alpha, f.metadata()!.get("ss_network_alpha"));
    await page.click("#metadata-box > summary");
    const tagRow = page.locator("#metadata tr", { has: page.locator("th", { hasText: /^ss_tag_frequency$/ }) });
    await tagRow.locator("summary").click();
    const pretty = await tagRow.locator("pre").textContent();
    assert.match(pretty ?? "", /^\{\n {2}"/, "pretty-printed JSON");
    await shot("kohya-1280");
  });

  test("standalone: the 6-shard set, placement and a tensor from its shard", async () => {
    const files = fs.readdirSync(SHARDS).map((f) => path.join(SHARDS, f));
    await pick(files);
    await page.waitForSelector("#shards-box:not([hidden])");
    const shards = await page.$$eval("#shards tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));
    assert.equal(shards.length, 6);
    const index = JSON.parse(fs.readFileSync(path.join(SHARDS, "model.safetensors.index.json"), "utf8"));
    const [name, shard] = Object.entries(index.weight_map as Record<string, string>).at(-1)!;
    await page.fill("#filter", name);
    await page.waitForFunction(() => /^1 of/.test(document.querySelector("#tree-count")?.textContent ?? ""));
    await row(name).click();
    await detailShown(name);
    const shown = await shownStats(page);
    assert.equal(shown.shard, shard);
    assertStats(shown, path.join(SHARDS, shard), name);
    await shot("shards-1280");
  });

  test("standalone: an invalid file shows its error code", async () => {
    await pick(INVALID);
    await page.waitForSelector("#error:not([hidden])");
    assert.match((await page.textContent("#error .code")) ?? "", /^DuplicateKey$/);
  });

  test("standalone: 10,000 tensors in a virtualized tree", async () => {
    const tensors = new Map<string, Tensor>();
    for (let layer = 0; layer < 250; layer++) {
      for (let j = 0; j < 40; j++)
        tensors.set(`model.layers.${layer}.block${j}.weight`, Tensor.fromFloat32("F16", [2], [layer, j]));
    }
    const file = path.join(out, "ten-thousand.safetensors");
    fs.writeFileSync(file, serialize(tensors));
    await pick(file);
    await page.waitForFunction(() => document.querySelector("#tree-count")?.textContent === "10,000 tensors");
    // Open every layer: 10,250 rows, of which only those in view exist.
    await page.fill("#filter", ".");
    await page.waitForFunction(
      () => document.querySelector("#tree-count")?.textContent === "10,000 of 10,000 tensors match",
    );
    const rows = await page.locator(".tree-row").count();
    assert.ok(rows > 10 && rows < 200, `${rows} row elements`);
    await page.focus("#tree");
    await page.keyboard.press("End");
    await page.keyboard.press("Enter");
    await detailShown("model.layers.249.block9.weight");
    assert.equal((await shownStats(page)).max, "249");
  });

  test("standalone: a 10 GiB file is read lazily (header, then sampled blocks of one tensor)", async () => {
    // A sparse file: a header for one 10 GiB F32 tensor, then a hole (no disk used).
    const file = path.join(out, "ten-gib.safetensors");
    const bytes = 10 * 2 ** 30;
    // Wide rows: the heat map reads one 160 KiB row per band (a tall tensor reads thousands of short rows).
    let header = JSON.stringify({ big: { dtype: "F32", shape: [65536, 40960], data_offsets: [0, bytes] } });
    header = header.padEnd(Math.ceil(header.length / 8) * 8, " ");
    const fd = fs.openSync(file, "w");
    try {
      const prefix = Buffer.alloc(8);
      prefix.writeBigUInt64LE(BigInt(header.length));
      fs.writeSync(fd, prefix);
      fs.writeSync(fd, header);
      fs.ftruncateSync(fd, 8 + header.length + bytes);
    } finally {
      fs.closeSync(fd);
    }
    await page.goto(plain.url);
    await ready();
    await page.evaluate(() => {
      const w = window as unknown as { blobBytes: number };
      w.blobBytes = 0;
      const slice = Blob.prototype.slice;
      Blob.prototype.slice = function (this: Blob, start?: number, end?: number, type?: string) {
        const part = slice.call(this, start, end, type);
        w.blobBytes += part.size;
        return part;
      };
    });
    await pick(file);
    await row("big").click();
    await detailShown("big");
    const read = await page.evaluate(() => (window as unknown as { blobBytes: number }).blobBytes);
    assert.ok(read < 64 * 2 ** 20, `read ${read} bytes of a 10 GiB file`);
    const sampled = (await page.textContent("#detail .sampled")) ?? "";
    assert.match(sampled, /of 2,684,354,560 elements/);
    assert.equal((await shownStats(page)).zeros, (4 * 2 ** 20).toLocaleString("en"));
    fs.rmSync(file);
  });

  test("opened from disk (file://), the page starts and waits for a file", async () => {
    errors = [];
    await page.goto(pathToFileURL(path.join(out, "index.html")).href);
    await ready();
    assert.ok(await page.isVisible("#welcome"));
    await pick(GPT2);
    await page.waitForSelector("#view:not([hidden])");
    assert.deepEqual(errors, []);
  });
});
