// Read two tensors of a sharded checkpoint by URL, and check them against the same tensors read from disk.
// Written from docs/remote.md and docs/reading.md alone (issue 19's test of the docs); test/docs-tasks.test.ts runs it.
//
//   npx tsx read-sharded-by-url.ts CHECKPOINT_DIR NAME SLICE_NAME
// serves CHECKPOINT_DIR over HTTP on 127.0.0.1 (a static server that answers Range requests, as the docs require),
// then reads NAME whole and SLICE_NAME[0:2, :, 1] through openShardedAsync.
import { readFileSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { openSharded, openShardedAsync } from "safetensors-ts";

const [dir, name, sliced] = process.argv.slice(2);
if (!dir || !name || !sliced) throw new Error("usage: read-sharded-by-url.ts CHECKPOINT_DIR NAME SLICE_NAME");

// A static file server that answers Range requests (docs: "The server must answer HTTP Range requests").
let served = 0;
const server = createServer((req, res) => {
  const path = join(dir, decodeURIComponent(new URL(req.url!, "http://x").pathname));
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    res.writeHead(404).end();
    return;
  }
  const bytes = readFileSync(path);
  const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "");
  if (!range) {
    served += size;
    res.writeHead(200, { "Content-Length": size, "Accept-Ranges": "bytes" }).end(bytes);
    return;
  }
  const start = Number(range[1]);
  const end = Math.min(range[2] ? Number(range[2]) : size - 1, size - 1);
  served += end - start + 1;
  res
    .writeHead(206, { "Content-Range": `bytes ${start}-${end}/${size}`, "Content-Length": end - start + 1 })
    .end(bytes.subarray(start, end + 1));
});
await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
const { port } = server.address() as { port: number };

try {
  const ckpt = await openShardedAsync(`http://127.0.0.1:${port}/model.safetensors.index.json`);
  try {
    const a = await ckpt.getTensor(name);
    const b = await ckpt.getSlice(sliced).get("0:2, :, 1");
    console.log(ckpt.shardOf(name), a.dtype, a.shape, a.toFloat32().slice(0, 5));
    console.log(ckpt.shardOf(sliced), b.dtype, b.shape, b.toFloat32().slice(0, 5));

    // The same tensors read locally must be the same bytes.
    using local = openSharded(dir);
    const la = local.getTensor(name);
    const lb = local.getSlice(sliced).get("0:2, :, 1");
    const same = (x: Uint8Array, y: Uint8Array) => x.length === y.length && x.every((v, i) => v === y[i]);
    if (!same(a.data, la.data) || !same(b.data, lb.data)) throw new Error("remote bytes differ from local bytes");
    console.log(`ok: both tensors equal the local ones (${served} bytes served, the index and shard headers included)`);
  } finally {
    await ckpt.close();
  }
} finally {
  server.close();
}
