/**
 * Integrity manifests: one flipped byte in any tensor of a real file is found and the tensor named; metadata and
 * header changes are named; sharded checkpoints (missing and extra shards); Ed25519 signatures in a DSSE envelope
 * (in-toto Statement, model signing's predicate) verify, and a tampered payload, signature or a wrong key is refused.
 */
import assert from "node:assert/strict";
import { createHash, generateKeyPairSync } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import fc from "fast-check";
import { SafetensorError } from "../src/format/errors.js";
import { preAuthEncoding, signManifest, verifyEnvelope } from "../src/integrity/dsse.js";
import { createManifest, verifyManifest } from "../src/integrity/manifest.js";
import { saveFile, serialize, Tensor } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-manifest-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
let count = 0;
const fresh = (name = ".safetensors") => path.join(tmp, `${count++}${name}`);

const keys = generateKeyPairSync("ed25519");
const privatePem = keys.privateKey.export({ type: "pkcs8", format: "pem" }) as string;
const publicPem = keys.publicKey.export({ type: "spki", format: "pem" }) as string;
const otherPublicPem = generateKeyPairSync("ed25519").publicKey.export({ type: "spki", format: "pem" }) as string;

const code = (expected: string) => (error: unknown) => error instanceof SafetensorError && error.code === expected;

describe("manifest: a single flipped byte names its tensor", {
  skip: corpusAvailable ? false : corpusMissingReason,
}, () => {
  const files = expectedFiles().filter(
    (e) => e.ok && (e.tensors?.some((t) => t.data_offsets[1] > t.data_offsets[0]) ?? false),
  );

  test("any corpus file, any byte of any tensor", () => {
    fc.assert(
      fc.property(fc.nat(), fc.nat(), fc.nat(), fc.integer({ min: 1, max: 255 }), (f, t, b, mask) => {
        const entry = files[f % files.length]!;
        const source = path.join(corpusDir, entry.file);
        const manifest = createManifest(source);
        const tensors = entry.tensors!.filter((x) => x.data_offsets[1] > x.data_offsets[0]);
        const tensor = tensors[t % tensors.length]!;
        const bytes = new Uint8Array(fs.readFileSync(source));
        const dataStart = 8 + Number(new DataView(bytes.buffer).getBigUint64(0, true));
        const [begin, end] = tensor.data_offsets;
        bytes[dataStart + begin + (b % (end - begin))]! ^= mask;
        const copy = fresh();
        fs.writeFileSync(copy, bytes);
        const report = verifyManifest(copy, manifest);
        assert.equal(report.ok, false);
        const [file] = report.files;
        assert.equal(file!.status, "changed");
        assert.deepEqual(file!.tensors, [{ name: tensor.name, status: "changed" }]);
        assert.deepEqual([file!.metadata, file!.headerChanged], [[], false]);
        fs.rmSync(copy);
      }),
      { numRuns: 30 },
    );
  });

  test("the unchanged file verifies; its manifest holds the reference's tensor digests", () => {
    const entry = files[0]!;
    const source = path.join(corpusDir, entry.file);
    const manifest = createManifest(source);
    assert.deepEqual(verifyManifest(source, manifest), {
      ok: true,
      files: [{ name: entry.file, path: source, status: "ok" }],
    });
    assert.deepEqual(
      manifest.files[0]!.tensors!.map((t) => [t.name, t.sha256]),
      entry.tensors!.map((t) => [t.name, t.sha256]),
    );
  });
});

describe("manifest: metadata, header, sharded checkpoints", () => {
  const w = new Tensor("F32", [2, 2], new Uint8Array(16).fill(3));

  test("metadata keys added, removed, changed are named; tensors added and missing", () => {
    const file = fresh();
    saveFile(file, { w, b: w }, { a: "1", gone: "x" });
    const manifest = createManifest(file);
    saveFile(file, { w, c: w }, { a: "2", new: "y" });
    const [check] = verifyManifest(file, manifest).files;
    assert.equal(check!.status, "changed");
    assert.deepEqual(check!.tensors, [
      { name: "b", status: "missing" },
      { name: "c", status: "added" },
    ]);
    assert.deepEqual(
      check!.metadata!.map((m) => m.key),
      ["a", "gone", "new"],
    );
    assert.equal(check!.headerChanged, true);
  });

  test("a sharded checkpoint: a changed shard, a missing one, an extra one the index lists", () => {
    const dir = fresh("-dir");
    fs.mkdirSync(dir);
    const tensors = { a: w, b: new Tensor("F32", [4], new Uint8Array(16).fill(1)), c: w };
    const save = () => {
      fs.writeFileSync(path.join(dir, "model-00001-of-00002.safetensors"), serialize({ a: tensors.a, b: tensors.b }));
      fs.writeFileSync(path.join(dir, "model-00002-of-00002.safetensors"), serialize({ c: tensors.c }));
      const index = {
        metadata: {},
        weight_map: {
          a: "model-00001-of-00002.safetensors",
          b: "model-00001-of-00002.safetensors",
          c: "model-00002-of-00002.safetensors",
        },
      };
      fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify(index));
    };
    save();
    const manifest = createManifest(dir);
    assert.equal(manifest.kind, "sharded");
    assert.deepEqual(
      manifest.files.map((f) => f.name),
      ["model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
    );
    assert.equal(verifyManifest(dir, manifest).ok, true);
    const changed = new Uint8Array(16).fill(1);
    changed[5] = 9;
    fs.writeFileSync(
      path.join(dir, "model-00001-of-00002.safetensors"),
      serialize({ a: w, b: new Tensor("F32", [4], changed) }),
    );
    const report = verifyManifest(dir, manifest);
    assert.deepEqual(
      report.files.map((f) => [f.name, f.status, f.tensors]),
      [
        ["model.safetensors.index.json", "ok", undefined],
        ["model-00001-of-00002.safetensors", "changed", [{ name: "b", status: "changed" }]],
        ["model-00002-of-00002.safetensors", "ok", undefined],
      ],
    );
    fs.rmSync(path.join(dir, "model-00002-of-00002.safetensors"));
    assert.equal(verifyManifest(dir, manifest).files[2]!.status, "missing");
  });
});

describe("manifest signatures: DSSE envelope, in-toto Statement, Ed25519", () => {
  const file = fresh();
  saveFile(file, { w: new Tensor("F32", [2], new Uint8Array(8).fill(7)) }, { note: "signed" });
  const manifest = createManifest(file);
  const envelope = signManifest(manifest, privatePem);

  test("the envelope: in-toto payload type, model signing's predicate, subject digest over the resources", () => {
    assert.equal(envelope.payloadType, "application/vnd.in-toto+json");
    const statement = JSON.parse(Buffer.from(envelope.payload, "base64").toString("utf8"));
    assert.equal(statement._type, "https://in-toto.io/Statement/v1");
    assert.equal(statement.predicateType, "https://model_signing/signature/v1.0");
    const [resource] = statement.predicate.resources;
    assert.deepEqual(resource, {
      name: manifest.files[0]!.name,
      algorithm: "sha256",
      digest: manifest.files[0]!.sha256,
    });
    const root = createHash("sha256").update(Buffer.from(resource.digest, "hex")).digest("hex");
    assert.deepEqual(statement.subject, [{ name: manifest.model, digest: { sha256: root } }]);
    assert.deepEqual(statement.predicate.safetensors_manifest, manifest);
    // DSSE's pre-authentication encoding, byte for byte.
    assert.equal(preAuthEncoding("t", Buffer.from("ab")).toString(), "DSSEv1 1 t 2 ab");
    assert.deepEqual(verifyEnvelope(envelope, publicPem), manifest);
  });

  test("a wrong key, a tampered payload or signature is SignatureInvalid; a re-signed lie is ManifestInvalid", () => {
    assert.throws(() => verifyEnvelope(envelope, otherPublicPem), code("SignatureInvalid"));
    const statement = JSON.parse(Buffer.from(envelope.payload, "base64").toString("utf8"));
    statement.predicate.safetensors_manifest.files[0].tensors[0].sha256 = "0".repeat(64);
    const tampered = { ...envelope, payload: Buffer.from(JSON.stringify(statement)).toString("base64") };
    assert.throws(() => verifyEnvelope(tampered, publicPem), code("SignatureInvalid"));
    const sig = Buffer.from(envelope.signatures[0]!.sig, "base64");
    sig[3]! ^= 1;
    const badSig = { ...envelope, signatures: [{ ...envelope.signatures[0]!, sig: sig.toString("base64") }] };
    assert.throws(() => verifyEnvelope(badSig, publicPem), code("SignatureInvalid"));
    const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey.export({ type: "spki", format: "pem" });
    assert.throws(() => verifyEnvelope(envelope, rsa as string), code("InvalidOption"));
  });

  test("CLI: create, sign, verify --pubkey; a flipped byte names the tensor, exit 1; wrong key exits 1", async () => {
    const target = fresh();
    fs.copyFileSync(file, target);
    const keyFile = fresh(".pem");
    const pubFile = fresh(".pem");
    const otherFile = fresh(".pem");
    fs.writeFileSync(keyFile, privatePem);
    fs.writeFileSync(pubFile, publicPem);
    fs.writeFileSync(otherFile, otherPublicPem);
    assert.equal((await cli("manifest", "create", target)).code, 0);
    assert.ok(fs.existsSync(`${target}.manifest.json`));
    assert.equal((await cli("manifest", "sign", `${target}.manifest.json`, "--key", keyFile)).code, 0);
    assert.ok(fs.existsSync(`${target}.manifest.sig.json`));
    const ok = await cli("manifest", "verify", target, "--pubkey", pubFile);
    assert.deepEqual([ok.code, ok.stdout], [0, "ok: 1 file match, signature verified\n"]);
    assert.equal((await cli("manifest", "verify", target)).code, 0);
    const wrong = await cli("manifest", "verify", target, "--pubkey", otherFile);
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /^error\[SignatureInvalid\]/);
    const bytes = fs.readFileSync(target);
    bytes[bytes.length - 1]! ^= 1;
    fs.writeFileSync(target, bytes);
    const changed = await cli("manifest", "verify", target, "--pubkey", pubFile, "--json");
    assert.equal(changed.code, 1);
    const report = JSON.parse(changed.stdout);
    assert.deepEqual(report.files[0].tensors, [{ name: "w", status: "changed" }]);
    const unsigned = await cli("manifest", "verify", target, "-m", `${target}.manifest.sig.json`);
    assert.equal(unsigned.code, 2);
  });
});
