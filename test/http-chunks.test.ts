/**
 * HttpSource.readChunks: a range handed on as the body arrives, and a body cut off midway requested again from
 * where it stopped (not from the start); a file that changed in between is SourceChanged, not bytes of two versions.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { HttpSource } from "../src/node.js";
import { type EdgeServer, startEdgeServer } from "./helpers/edge-server.js";
import { hasCode } from "./helpers/errors.js";
import { fill } from "./helpers/fill.js";

const bytes = fill(3 << 20, 5);
let server: EdgeServer;

before(async () => {
  server = await startEdgeServer(new Map([["/f.bin", { bytes }]]));
});
after(() => server.close());

/** A fetch whose responses' bodies fail after `cutAfter` bytes, the first `cuts` times. */
function cuttingFetch(cutAfter: number, cuts: number): typeof fetch {
  let left = cuts;
  return async (input, init) => {
    const response = await fetch(input, init);
    if (left <= 0 || !response.body || response.status !== 206) return response;
    const reader = response.body.getReader();
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = await reader.read();
        if (next.done) return controller.close();
        if (sent + next.value.length > cutAfter && left > 0) {
          left--;
          controller.enqueue(next.value.subarray(0, cutAfter - sent));
          reader.cancel().catch(() => {});
          controller.error(new TypeError("network error"));
          return;
        }
        sent += next.value.length;
        controller.enqueue(next.value);
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
}

async function collect(source: HttpSource, offset: number, length: number): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  let at = 0;
  await source.readChunks(offset, length, (chunk) => {
    out.set(chunk, at);
    at += chunk.length;
  });
  assert.equal(at, length);
  return out;
}

test("readChunks hands the range on in chunks, equal to the file", async () => {
  const source = new HttpSource(`${server.url}/f.bin`);
  await source.openWithHead(8);
  let chunks = 0;
  await source.readChunks(1000, 2 << 20, () => {
    chunks++;
  });
  assert.ok(chunks > 1, `${chunks} chunks`);
  assert.deepEqual(await collect(source, 1000, 2 << 20), bytes.subarray(1000, 1000 + (2 << 20)));
});

test("a body cut off midway is requested again from where it stopped", async () => {
  const source = new HttpSource(`${server.url}/f.bin`, { fetch: cuttingFetch(700_000, 2), retryDelayMs: 1 });
  await source.openWithHead(8);
  server.requests.length = 0;
  assert.deepEqual(await collect(source, 100, 2_000_000), bytes.subarray(100, 2_000_100));
  assert.deepEqual(
    server.requests.map((r) => r.range),
    // Cut after 700 000 bytes twice: each retry starts where the last one stopped.
    ["bytes=100-2000099", "bytes=700100-2000099", "bytes=1400100-2000099"],
  );
});

test("a file changed between the cut and the retry is SourceChanged", async () => {
  const changed = new Map([
    ["/g.bin", { bytes, next: { after: 1, served: { bytes: fill(3 << 20, 6), etag: '"v2"' } } }],
  ]);
  const other = await startEdgeServer(changed);
  try {
    const source = new HttpSource(`${other.url}/g.bin`, { fetch: cuttingFetch(500_000, 1), retryDelayMs: 1 });
    await source.openWithHead(8);
    await assert.rejects(collect(source, 0, 2_000_000), hasCode("SourceChanged"));
  } finally {
    await other.close();
  }
});
