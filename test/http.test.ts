/**
 * HTTP sources against real servers: nginx serving the corpus (requests and bytes counted from its access log), and
 * a small Node server for what nginx does not do (ignoring Range, no Content-Length, 5xx, files changing mid-read).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { open, openFile, serialize, Tensor } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { type EdgeServer, startEdgeServer } from "./helpers/edge-server.js";
import { hasCode as code } from "./helpers/errors.js";
import { fill } from "./helpers/fill.js";
import { type Nginx, nginxBinary, nginxMissingReason, startNginx } from "./helpers/nginx.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-http-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** A file with one U8 tensor whose header (N) is exactly `headerBytes` (a multiple of 8), padded by metadata. */
function withHeader(headerBytes: number, dataLength = 1000): Uint8Array {
  const tensors = new Map([["t", Tensor.fromTypedArray("U8", [dataLength], fill(dataLength, 3))]]);
  for (let pad = headerBytes - 80; ; ) {
    const bytes = serialize(tensors, { pad: "x".repeat(pad) });
    const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
    if (n === headerBytes) return bytes;
    pad += headerBytes - n;
  }
}

const mib = 1 << 20;

describe("nginx", { skip: nginxBinary === null ? nginxMissingReason : false }, () => {
  let nginx: Nginx;
  let fixtures: string;
  before(async () => {
    nginx = (await startNginx(corpusAvailable ? { "/corpus/": corpusDir } : {}))!;
    fixtures = nginx.files;
    fs.writeFileSync(path.join(fixtures, "big-header.safetensors"), withHeader(mib + 96));
    fs.writeFileSync(path.join(fixtures, "exact.safetensors"), withHeader(mib - 8));
  });
  after(() => nginx?.stop());

  test("corpus: every file reads as from disk; one request for each header under 1 MiB", {
    skip: corpusAvailable ? false : corpusMissingReason,
  }, async () => {
    for (const expected of expectedFiles()) {
      const local = path.join(corpusDir, expected.file);
      const url = `${nginx.url}/corpus/${encodeURIComponent(expected.file)}`;
      await nginx.clearLog();
      if (!expected.ok) {
        let localCode = "";
        try {
          openFile(local).close();
        } catch (error) {
          localCode = (error as { code: string }).code;
        }
        await assert.rejects(open(url), code(localCode), expected.file);
        continue;
      }
      const sync = openFile(local, { backend: "pread" });
      const file = await open(url);
      const opened = await nginx.log();
      assert.equal(opened.length, 1, `${expected.file}: ${JSON.stringify(opened)}`);
      assert.equal(opened[0]!.range, `bytes=0-${mib - 1}`);
      assert.equal(opened[0]!.bytes, Math.min(mib, fs.statSync(local).size));
      assert.deepEqual(file.keys(), sync.keys());
      assert.deepEqual(file.metadata(), sync.metadata());
      const all = await file.getTensors();
      for (const name of sync.offsetKeys()) assert.deepEqual(all.get(name)!.data, sync.getTensor(name).data, name);
      // Nothing is read twice: the data after the first read is fetched once.
      const served = (await nginx.log()).reduce((sum, e) => sum + e.bytes, 0);
      assert.ok(served <= sync.header.fileLength, `${expected.file}: ${served} bytes served`);
      sync.close();
      await file.close();
    }
  });

  test("a header ending exactly at 1 MiB takes one request; one larger takes a second for exactly the rest", async () => {
    await nginx.clearLog();
    const exact = await open(`${nginx.url}/fx/exact.safetensors`);
    assert.equal(exact.header.dataStart, mib);
    assert.equal((await nginx.log()).length, 1);
    await nginx.clearLog();
    const big = await open(`${nginx.url}/fx/big-header.safetensors`);
    const log = await nginx.log();
    assert.deepEqual(
      log.map((e) => e.range),
      [`bytes=0-${mib - 1}`, `bytes=${mib}-${big.header.dataStart - 1}`],
    );
    assert.equal((await big.getTensor("t")).data[0], fill(1, 3)[0]);
    await exact.close();
    await big.close();
  });

  test("a slice reads only its runs", async () => {
    const values = Float32Array.from({ length: 64 * 1024 }, (_, i) => i);
    const name = "slice.safetensors";
    fs.writeFileSync(
      path.join(fixtures, name),
      serialize(new Map([["m", Tensor.fromTypedArray("F32", [256, 256], values)]])),
    );
    const file = await open(`${nginx.url}/fx/${name}`, { firstReadBytes: 4096 });
    await nginx.clearLog();
    const rows = await file.getSlice("m").get("10:20, 0:64", { signal: AbortSignal.timeout(10_000) });
    assert.deepEqual(rows.shape, [10, 64]);
    assert.equal((rows.typed() as Float32Array)[64], 11 * 256);
    const log = await nginx.log();
    // Ten runs of 256 bytes, 768-byte gaps: bridged by the default gap into one request of 9 rows + 256 bytes.
    assert.equal(log.length, 1);
    assert.equal(log[0]!.bytes, 9 * 1024 + 256);
    await nginx.clearLog();
    await file.readPlan("m", file.slicePlan("m", "10:20, 0:64"), { maxGap: 0 });
    assert.equal((await nginx.log()).length, 10);
    assert.equal(
      (await nginx.log()).reduce((s, e) => s + e.bytes, 0),
      10 * 256,
    );
    await file.close();
  });

  test("missing files are HttpError, not retried", async () => {
    await nginx.clearLog();
    await assert.rejects(open(`${nginx.url}/fx/missing.safetensors`), code("HttpError"));
    assert.equal((await nginx.log()).length, 1);
  });
});

describe("edge behaviours", () => {
  let server: EdgeServer;
  const data = serialize(
    new Map([
      ["a", Tensor.fromTypedArray("U8", [1000], fill(1000, 1))],
      ["b", Tensor.fromTypedArray("U8", [32 * mib], fill(32 * mib, 2))],
      ["c", Tensor.fromTypedArray("U8", [1000], fill(1000, 4))],
    ]),
  );
  before(async () => {
    server = await startEdgeServer();
  });
  after(() => server.close());
  const serve = (name: string, served: Parameters<typeof server.files.set>[1]) => {
    server.files.set(`/${name}`, served);
    return `${server.url}/${name}`;
  };
  const quick = { retryDelayMs: 1, firstReadBytes: 4096 };

  test("a server answering 200 to Range: only the needed prefix is pulled, then the body is cancelled", async () => {
    const url = serve("ignore.safetensors", { bytes: data, mode: "ignore-range" });
    const file = await open(url, quick);
    assert.deepEqual((await file.getTensor("a")).data, fill(1000, 1));
    assert.equal(server.requests.length, 1);
    assert.equal(server.requests[0]!.status, 200);
    assert.ok(server.requests[0]!.bytesSent < 8 * mib, `${server.requests[0]!.bytesSent} bytes sent for 4 KiB`);
    // A tensor after the big one: the body is read up to it (not kept), then cancelled.
    assert.deepEqual((await file.getTensor("c")).data, fill(1000, 4));
    assert.equal(server.requests.length, 2);
    await file.close();
    server.requests.length = 0;
  });

  test("200 without Content-Length cannot be sized without downloading it all: HttpError", async () => {
    const url = serve("nolength.safetensors", { bytes: data, mode: "no-length" });
    await assert.rejects(open(url, quick), code("HttpError"));
    assert.ok(server.requests[0]!.bytesSent < 8 * mib);
    server.requests.length = 0;
  });

  test("5xx is retried with backoff, a bounded number of times", async () => {
    const ok = serve("flaky.safetensors", { bytes: data, failFirst: 2 });
    const file = await open(ok, quick);
    assert.deepEqual(file.keys(), ["a", "b", "c"]);
    assert.equal(server.requests.length, 3);
    await file.close();
    server.requests.length = 0;
    const bad = serve("down.safetensors", { bytes: data, failFirst: 100 });
    await assert.rejects(open(bad, { ...quick, retries: 2 }), (error: unknown) => {
      code("HttpError")(error);
      assert.match((error as Error).message, /503.*3 attempts/);
      return true;
    });
    assert.equal(server.requests.length, 3);
    server.requests.length = 0;
  });

  test("a file changed between reads is SourceChanged (ETag, Last-Modified, size)", async () => {
    const changed = serialize(new Map([["a", Tensor.fromTypedArray("U8", [1000], fill(1000, 9))]]));
    const variants: [string, Parameters<typeof serve>[1]][] = [
      ["etag", { bytes: data, etag: '"v1"', next: { after: 1, served: { bytes: data, etag: '"v2"' } } }],
      [
        "last-modified",
        {
          bytes: data,
          etag: null,
          lastModified: "Mon, 30 Nov 2026 10:00:00 GMT",
          next: { after: 1, served: { bytes: data, etag: null, lastModified: "Tue, 01 Dec 2026 10:00:00 GMT" } },
        },
      ],
      ["size", { bytes: data, etag: null, next: { after: 1, served: { bytes: changed, etag: null } } }],
    ];
    for (const [label, served] of variants) {
      const file = await open(serve(`changed-${label}.safetensors`, served), quick);
      await assert.rejects(file.getTensor("c"), code("SourceChanged"), label);
      await file.close();
    }
    server.requests.length = 0;
  });

  test("an empty file (416 to the first range) is HeaderTooSmall", async () => {
    await assert.rejects(open(serve("empty.safetensors", { bytes: new Uint8Array(0) }), quick), code("HeaderTooSmall"));
    assert.equal(server.requests[0]!.status, 416);
    server.requests.length = 0;
  });

  test("redirects are followed; custom headers and fetch are used for every request", async () => {
    serve("real.safetensors", { bytes: data, authorization: "Bearer secret" });
    const url = serve("moved.safetensors", { bytes: data, redirect: "/real.safetensors" });
    await assert.rejects(open(url, quick), code("HttpError"));
    let calls = 0;
    const file = await open(url, {
      ...quick,
      headers: { Authorization: "Bearer secret" },
      fetch: (input, init) => {
        calls++;
        return fetch(input, init);
      },
    });
    assert.deepEqual((await file.getTensor("c")).data, fill(1000, 4));
    assert.equal(calls, 2);
    await file.close();
    server.requests.length = 0;
  });

  test("an aborted read stops", async () => {
    const file = await open(serve("abort.safetensors", { bytes: data }), quick);
    const controller = new AbortController();
    const pending = file.getTensor("b", { signal: controller.signal });
    controller.abort(new Error("user stop"));
    await assert.rejects(pending, /user stop/);
    await file.close();
    server.requests.length = 0;
  });

  test("URLs in error messages drop their query (signed URLs carry credentials there)", async () => {
    await assert.rejects(open(`${server.url}/nothing?X-Amz-Signature=abc`, quick), (error: unknown) => {
      assert.doesNotMatch((error as Error).message, /abc/);
      return true;
    });
  });
});
