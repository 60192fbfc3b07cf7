/**
 * Rank-parallel loading: plans (default Llama rules, balanced uneven splits, rule errors), parts that put together
 * equal the full tensors for local, in-memory and HTTP sources, and the bytes each rank reads: its parts, nothing
 * more (counted on the source, and from nginx's access log for a 2-shard checkpoint loaded by `load-rank`).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import {
  AsyncSafetensorsFile,
  type ByteSource,
  MemoryByteSource,
  openFile,
  type ReadOptions,
  saveSharded,
  serialize,
  Tensor,
} from "../src/node.js";
import { loadRank } from "../src/rank/load.js";
import { LLAMA_RULES, parseRankRules, planRankLoad } from "../src/rank/plan.js";
import { hasCode as code } from "./helpers/errors.js";
import { fill } from "./helpers/fill.js";
import { nginxBinary, nginxMissingReason, startNginx } from "./helpers/nginx.js";
import { cli } from "./helpers/run-cli.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-rank-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** A small Llama-shaped checkpoint: vocab 1001 (not divisible by 4), hidden 128, intermediate 256, 2 layers. */
function llama(): Map<string, Tensor> {
  const [vocab, hidden, inter] = [1001, 128, 256];
  const shapes: [string, number[]][] = [["model.embed_tokens.weight", [vocab, hidden]]];
  for (let l = 0; l < 2; l++) {
    const p = `model.layers.${l}`;
    shapes.push(
      [`${p}.input_layernorm.weight`, [hidden]],
      [`${p}.self_attn.q_proj.weight`, [hidden, hidden]],
      [`${p}.self_attn.k_proj.weight`, [hidden / 2, hidden]],
      [`${p}.self_attn.v_proj.weight`, [hidden / 2, hidden]],
      [`${p}.self_attn.o_proj.weight`, [hidden, hidden]],
      [`${p}.post_attention_layernorm.weight`, [hidden]],
      [`${p}.mlp.gate_proj.weight`, [inter, hidden]],
      [`${p}.mlp.up_proj.weight`, [inter, hidden]],
      [`${p}.mlp.down_proj.weight`, [hidden, inter]],
    );
  }
  shapes.push(["model.norm.weight", [hidden]], ["lm_head.weight", [vocab, hidden]]);
  return new Map(
    shapes.map(([name, shape], i) => {
      const bytes = fill(shape.reduce((a, b) => a * b, 1) * 2, i + 1);
      return [name, new Tensor("BF16", shape, bytes)];
    }),
  );
}

/** Concatenate the ranks' parts of one tensor along `dim`. */
function assemble(parts: Tensor[], dim: number | null): Uint8Array {
  if (dim === null) return parts[0]!.data;
  const shape = parts[0]!.shape;
  const outer = shape.slice(0, dim).reduce((a, b) => a * b, 1);
  const rows = parts.map((p) => p.data.length / outer);
  const out = new Uint8Array(rows.reduce((a, b) => a + b, 0) * outer);
  let at = 0;
  for (let o = 0; o < outer; o++) {
    parts.forEach((p, r) => {
      out.set(p.data.subarray(o * rows[r]!, (o + 1) * rows[r]!), at);
      at += rows[r]!;
    });
  }
  return out;
}

class Counting implements ByteSource {
  bytes = 0;
  constructor(private readonly inner: ByteSource) {}
  get byteLength() {
    return this.inner.byteLength;
  }
  get kind() {
    return this.inner.kind;
  }
  get remote() {
    return false;
  }
  read(offset: number, length: number, options?: ReadOptions) {
    this.bytes += length;
    return this.inner.read(offset, length, options);
  }
  close() {
    return this.inner.close();
  }
}

describe("plans", () => {
  const tensors = llama();
  const bytes = serialize(tensors);
  const file = fs.writeFileSync(path.join(tmp, "llama.safetensors"), bytes);
  void file;

  test("Llama rules: column parallel on dim 0, row parallel on dim 1, norms replicated, balanced parts", () => {
    using handle = openFile(path.join(tmp, "llama.safetensors"));
    const plan = planRankLoad(handle, { rank: 3, worldSize: 4 });
    const byName = new Map(plan.tensors.map((t) => [t.name, t]));
    assert.deepEqual(byName.get("model.layers.0.self_attn.q_proj.weight")!.shape, [32, 128]);
    assert.deepEqual(byName.get("model.layers.0.self_attn.o_proj.weight")!.shape, [128, 32]);
    assert.deepEqual(byName.get("model.layers.1.mlp.down_proj.weight")!.shape, [128, 64]);
    assert.deepEqual(byName.get("model.norm.weight")!.shape, [128]);
    assert.equal(byName.get("model.norm.weight")!.dim, null);
    // 1001 rows over 4 ranks: 250, 250, 250, 251.
    assert.deepEqual(byName.get("lm_head.weight")!.shape, [251, 128]);
    assert.equal(byName.get("lm_head.weight")!.start, 750);
    assert.equal(
      plan.byteLength,
      plan.tensors.reduce((s, t) => s + t.plan.byteLength, 0),
    );
  });

  test("bad ranks, rules and dims are refused", () => {
    using handle = openFile(path.join(tmp, "llama.safetensors"));
    assert.throws(() => planRankLoad(handle, { rank: 4, worldSize: 4 }), code("InvalidOption"));
    assert.throws(() => planRankLoad(handle, { rank: 0, worldSize: 0 }), code("InvalidOption"));
    assert.throws(
      () => planRankLoad(handle, { rank: 0, worldSize: 2, rules: [{ pattern: "*norm*", split: 1 }] }),
      code("InvalidOption"),
    );
    assert.throws(() => parseRankRules({}), code("InvalidOption"));
    assert.throws(() => parseRankRules([{ pattern: "*", split: "half" }]), code("InvalidOption"));
    assert.deepEqual(parseRankRules([{ pattern: "a.*", split: -1 }]), [{ pattern: "a.*", split: -1 }]);
    assert.equal(LLAMA_RULES.at(-1)!.split, "replicate");
  });

  test("parts put together equal the full tensors; each rank reads exactly its parts", async () => {
    for (const worldSize of [1, 2, 4]) {
      const byRank: Map<string, Tensor>[] = [];
      let plans: ReturnType<typeof planRankLoad>[] = [];
      for (let rank = 0; rank < worldSize; rank++) {
        const source = new Counting(new MemoryByteSource(bytes));
        const handle = await AsyncSafetensorsFile.open(source, { firstReadBytes: 8 });
        const headerRead = source.bytes;
        byRank.push(await loadRank(handle, { rank, worldSize }));
        const plan = planRankLoad(handle, { rank, worldSize });
        plans = [...plans, plan];
        assert.equal(source.bytes - headerRead, plan.byteLength, `rank ${rank}/${worldSize}`);
      }
      for (const part of plans[0]!.tensors) {
        const whole = assemble(
          byRank.map((m) => m.get(part.name)!),
          part.dim,
        );
        assert.deepEqual(whole, tensors.get(part.name)!.data, `${part.name} over ${worldSize}`);
      }
    }
  });
});

describe("load-rank over HTTP: a 2-shard checkpoint, ranks 0-3 of 4", {
  skip: nginxBinary === null ? nginxMissingReason : false,
}, () => {
  test("parts equal the full tensors; bytes served = parts + headers", async () => {
    const nginx = (await startNginx({}))!;
    try {
      const tensors = llama();
      const saved = saveSharded(nginx.files, tensors, { maxShardSize: 600_000 });
      const shardFiles = fs.readdirSync(nginx.files).filter((f) => f.endsWith(".safetensors"));
      assert.equal(shardFiles.length, 2, JSON.stringify(saved));
      const headerBytes = shardFiles.reduce((sum, f) => {
        using shard = openFile(path.join(nginx.files, f));
        return sum + shard.header.dataStart;
      }, 0);
      const indexBytes = fs.statSync(path.join(nginx.files, "model.safetensors.index.json")).size;
      const url = `${nginx.url}/fx/model.safetensors.index.json`;
      const outputs: Map<string, Tensor>[] = [];
      let partBytes = 0;
      let servedBytes = 0;
      for (let rank = 0; rank < 4; rank++) {
        await nginx.clearLog();
        const out = path.join(tmp, `rank${rank}.safetensors`);
        const result = await cli("load-rank", url, "--rank", String(rank), "--world-size", "4", "--out", out);
        assert.equal(result.code, 0, result.stderr);
        using part = openFile(out);
        outputs.push(
          new Map(
            part
              .offsetKeys()
              .map((n) => [
                n,
                new Tensor(part.info(n).dtype, part.info(n).shape, part.getTensor(n, { memory: "owned" }).data),
              ]),
          ),
        );
        partBytes += part.header.dataLength;
        const log = await nginx.log();
        assert.ok(log.every((e) => e.status === 206 || e.status === 200));
        const served = log.reduce((sum, e) => sum + e.bytes, 0);
        // Exactly: the index, each shard's 8 + N header bytes, and this rank's parts.
        assert.equal(served, indexBytes + headerBytes + part.header.dataLength, `rank ${rank}`);
        servedBytes += served;
      }
      using local = openFile(path.join(tmp, "llama.safetensors"));
      const plan = planRankLoad(local, { rank: 0, worldSize: 4 });
      for (const t of plan.tensors) {
        assert.deepEqual(
          assemble(
            outputs.map((m) => m.get(t.name)!),
            t.dim,
          ),
          tensors.get(t.name)!.data,
          t.name,
        );
      }
      assert.ok(servedBytes <= 1.05 * (partBytes + 4 * (headerBytes + indexBytes)));
      // The same from the local directory and from the single-file checkpoint: byte-identical rank files.
      for (const source of [nginx.files, path.join(tmp, "llama.safetensors")]) {
        const out = path.join(tmp, "rank1-local.safetensors");
        const result = await cli("load-rank", source, "--rank", "1", "--world-size", "4", "--out", out);
        assert.equal(result.code, 0, result.stderr);
        using a = openFile(out);
        using b = openFile(path.join(tmp, "rank1.safetensors"));
        for (const name of b.keys()) assert.deepEqual(a.getTensor(name).data, b.getTensor(name).data, name);
      }
    } finally {
      await nginx.stop();
    }
  });
});
