/**
 * Integrity manifests: one flipped byte in any tensor of a real file is found and the tensor named; metadata and
 * header changes are named; sharded checkpoints (missing and extra shards); signatures in a Sigstore bundle (DSSE
 * envelope, in-toto Statement, model signing's predicate; Ed25519 and ECDSA) verify, the bare envelope of earlier
 * versions too, and a tampered payload, signature or a wrong key is refused with its code; the files of a model that
 * model signing itself signed are checked against its digests.
 */
import assert from "node:assert/strict";
import { createHash, createPublicKey, generateKeyPairSync, sign } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { SafetensorError } from "../src/format/errors.js";
import {
  preAuthEncoding,
  type SigstoreBundle,
  signedKind,
  signManifest,
  verifyEnvelope,
  verifySignedStatement,
} from "../src/integrity/dsse.js";
import { createManifest, verifyManifest, verifySignedFiles } from "../src/integrity/manifest.js";
import { parseManifest } from "../src/integrity/manifest-format.js";
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

describe("manifest signatures: Sigstore bundle, DSSE envelope, in-toto Statement", () => {
  const file = fresh();
  saveFile(file, { w: new Tensor("F32", [2], new Uint8Array(8).fill(7)) }, { note: "signed" });
  const manifest = createManifest(file);
  const bundle = signManifest(manifest, privatePem);
  const statementOfBundle = (b: SigstoreBundle) =>
    JSON.parse(Buffer.from(b.dsseEnvelope.payload, "base64").toString("utf8"));
  const withPayload = (b: SigstoreBundle, statement: unknown): SigstoreBundle => ({
    ...b,
    dsseEnvelope: { ...b.dsseEnvelope, payload: Buffer.from(JSON.stringify(statement)).toString("base64") },
  });

  test("golden: a fixed key and manifest give exactly the committed bundle (model signing's layout)", () => {
    // Ed25519 signatures are deterministic, so the whole bundle is.
    const goldenKey =
      "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIIi5y6asUeHTgnGiKdccVCRmVLX3dWxk+AaRgH1Kr1Ef\n-----END PRIVATE KEY-----\n";
    const goldenManifest = parseManifest({
      manifest_version: 1,
      model: "model",
      kind: "sharded",
      files: [
        { name: "model.safetensors.index.json", size: 3, sha256: "1".repeat(64) },
        {
          name: "model-00001-of-00001.safetensors",
          size: 88,
          sha256: "2".repeat(64),
          header_sha256: "3".repeat(64),
          metadata: null,
          tensors: [{ name: "w", dtype: "F32", shape: [2], data_offsets: [0, 8], sha256: "4".repeat(64) }],
        },
      ],
    });
    const golden = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "signed-manifest.bundle.json");
    const got = `${JSON.stringify(signManifest(goldenManifest, goldenKey), null, 1)}\n`;
    assert.equal(got, fs.readFileSync(golden, "utf8"));
    const b = JSON.parse(got);
    assert.deepEqual(Object.keys(b), ["mediaType", "verificationMaterial", "dsseEnvelope"]);
    assert.equal(b.mediaType, "application/vnd.dev.sigstore.bundle.v0.3+json");
    assert.deepEqual(Object.keys(b.verificationMaterial), ["publicKey", "tlogEntries"]);
    const publicPemText = createPublicKey(goldenKey).export({ type: "spki", format: "pem" }) as string;
    assert.equal(b.verificationMaterial.publicKey.hint, createHash("sha256").update(publicPemText).digest("hex"));
    assert.deepEqual(b.verificationMaterial.tlogEntries, []);
    assert.deepEqual(Object.keys(b.dsseEnvelope), ["payload", "payloadType", "signatures"]);
    assert.equal(b.dsseEnvelope.payloadType, "application/vnd.in-toto+json");
    assert.deepEqual(b.dsseEnvelope.signatures[0].keyid, "");
    const statement = statementOfBundle(b);
    assert.deepEqual(Object.keys(statement), ["_type", "subject", "predicateType", "predicate"]);
    // Resources sorted by name (code points), as model signing canonicalizes them; the subject digest over them.
    assert.deepEqual(
      statement.predicate.resources.map((r: { name: string }) => r.name),
      ["model-00001-of-00001.safetensors", "model.safetensors.index.json"],
    );
    const root = createHash("sha256")
      .update(Buffer.from("2".repeat(64) + "1".repeat(64), "hex"))
      .digest("hex");
    assert.deepEqual(statement.subject, [{ name: "model", digest: { sha256: root } }]);
    assert.deepEqual(statement.predicate.serialization, {
      method: "files",
      hash_type: "sha256",
      allow_symlinks: false,
    });
    assert.deepEqual(verifyEnvelope(b, publicPemText), goldenManifest);
  });

  test("a bundle model signing itself wrote (ECDSA P-384): its signature verifies with its key, not with another", () => {
    const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "model-signing");
    const real = JSON.parse(fs.readFileSync(path.join(dir, "model.sig"), "utf8"));
    const realKey = fs.readFileSync(path.join(dir, "signing-key-pub.pem"));
    assert.equal(signedKind(real), "bundle");
    // Past the hint and the signature: no manifest inside, the files it signed and the paths it ignored.
    assert.throws(
      () => verifyEnvelope(real, realKey),
      (error: unknown) => code("ManifestInvalid")(error) && /the signature verifies/.test((error as Error).message),
    );
    const vouched = verifySignedStatement(real, realKey);
    assert.equal(vouched.manifest, null);
    assert.deepEqual(
      vouched.resources.map((r) => r.name),
      ["signme-1", "signme-2"],
    );
    assert.ok(vouched.ignorePaths.includes("ignore-me"));
    assert.throws(() => verifyEnvelope(real, publicPem), code("SignatureKeyMismatch"));
    const statement = JSON.parse(Buffer.from(real.dsseEnvelope.payload, "base64").toString("utf8"));
    statement.predicate.resources[0].digest = "0".repeat(64);
    const tampered = {
      ...real,
      dsseEnvelope: { ...real.dsseEnvelope, payload: Buffer.from(JSON.stringify(statement)).toString("base64") },
    };
    assert.throws(() => verifyEnvelope(tampered, realKey), code("SignatureInvalid"));
    // Our bundles have the same shape as this one, key for key.
    const ec = generateKeyPairSync("ec", { namedCurve: "P-384" });
    const ours = signManifest(manifest, ec.privateKey.export({ type: "pkcs8", format: "pem" }));
    const shape = (value: unknown): unknown =>
      Array.isArray(value)
        ? value.map(shape)
        : value !== null && typeof value === "object"
          ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shape(v)]))
          : typeof value;
    assert.deepEqual(shape(ours), shape(real));
  });

  test("the model a model-signing bundle signed: its files checked against the signed digests (CLI and library)", async () => {
    const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "model-signing");
    // The model model signing signed (its repository's scripts/tests/v1.1.0-elliptic-key): two one-line files and
    // one it was told to ignore; the signature inside the directory, as model signing writes it.
    const model = fresh("-model");
    fs.mkdirSync(model);
    fs.writeFileSync(path.join(model, "signme-1"), "signme-1\n");
    fs.writeFileSync(path.join(model, "signme-2"), "signme-2");
    fs.writeFileSync(path.join(model, "ignore-me"), "anything");
    const sig = path.join(model, "model.sig");
    fs.copyFileSync(path.join(fixtures, "model.sig"), sig);
    const pub = path.join(fixtures, "signing-key-pub.pem");
    const ok = await cli("manifest", "verify", model, "-m", sig, "--pubkey", pub);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /^ok: 2 files match, signature verified\n$/);
    // Another key: refused before any file is read.
    const keyFile = fresh(".pem");
    fs.writeFileSync(keyFile, publicPem);
    const wrong = await cli("manifest", "verify", model, "-m", sig, "--pubkey", keyFile);
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /SignatureKeyMismatch/);
    // A changed file, an unsigned one and a missing one, each named.
    fs.writeFileSync(path.join(model, "signme-2"), "signme-3");
    fs.writeFileSync(path.join(model, "added.bin"), "x");
    fs.mkdirSync(path.join(model, "sub"));
    fs.writeFileSync(path.join(model, "sub", "deep"), "y");
    fs.rmSync(path.join(model, "signme-1"));
    const bad = await cli("manifest", "verify", model, "-m", sig, "--pubkey", pub, "--json");
    assert.equal(bad.code, 1);
    const report = JSON.parse(bad.stdout) as {
      ok: boolean;
      signed: boolean;
      files: { name: string; status: string }[];
    };
    assert.equal(report.ok, false);
    assert.deepEqual(report.files.map((f) => [f.name, f.status]).sort(), [
      ["added.bin", "extra"],
      ["signme-1", "missing"],
      ["signme-2", "changed"],
      ["sub/deep", "extra"],
    ]);
    // The library: a one-file statement checks one file under any name; a symbolic link is never followed.
    const one = {
      resources: [{ name: "w.bin", digest: createHash("sha256").update("w").digest("hex") }],
      ignorePaths: [],
    };
    const single = fresh(".bin");
    fs.writeFileSync(single, "w");
    assert.equal(verifySignedFiles(single, one).ok, true);
    fs.writeFileSync(single, "v");
    assert.deepEqual(
      verifySignedFiles(single, one).files.map((f) => f.status),
      ["changed"],
    );
    const linked = fresh("-linked");
    fs.mkdirSync(linked);
    fs.writeFileSync(path.join(tmp, "target-w"), "w");
    fs.symlinkSync(path.join(tmp, "target-w"), path.join(linked, "w.bin"));
    assert.deepEqual(
      verifySignedFiles(linked, one).files.map((f) => [f.name, f.status, f.error?.code]),
      [["w.bin", "unreadable", "UnsafePath"]],
    );
    assert.throws(
      () =>
        verifySignedFiles(single, {
          resources: [...one.resources, { name: "b", digest: "0".repeat(64) }],
          ignorePaths: [],
        }),
      code("ManifestInvalid"),
    );
  });

  test("round trip with Ed25519 and ECDSA P-256/P-384 keys; the bare envelope of earlier versions still verifies", () => {
    assert.deepEqual(verifyEnvelope(bundle, publicPem), manifest);
    assert.equal(signedKind(bundle), "bundle");
    for (const namedCurve of ["P-256", "P-384"]) {
      const ec = generateKeyPairSync("ec", { namedCurve });
      const signed = signManifest(manifest, ec.privateKey.export({ type: "pkcs8", format: "pem" }));
      const pub = ec.publicKey.export({ type: "spki", format: "pem" }) as string;
      assert.deepEqual(verifyEnvelope(signed, pub), manifest);
      assert.throws(() => verifyEnvelope(signed, publicPem), code("SignatureKeyMismatch"));
    }
    // What earlier versions wrote: the envelope alone, keyid = SHA-256 of the key's SPKI DER.
    const keyid = createHash("sha256")
      .update(keys.publicKey.export({ type: "spki", format: "der" }))
      .digest("hex");
    const bare = { ...bundle.dsseEnvelope, signatures: [{ keyid, sig: bundle.dsseEnvelope.signatures[0]!.sig }] };
    assert.equal(signedKind(bare), "envelope");
    assert.deepEqual(verifyEnvelope(bare, publicPem), manifest);
    assert.throws(() => verifyEnvelope(bare, otherPublicPem), code("SignatureKeyMismatch"));
    // DSSE's pre-authentication encoding, byte for byte.
    assert.equal(preAuthEncoding("t", Buffer.from("ab")).toString(), "DSSEv1 1 t 2 ab");
  });

  test("refusals: wrong key, tampered payload or signature, altered hint, keyless or other bundles", () => {
    assert.throws(() => verifyEnvelope(bundle, otherPublicPem), code("SignatureKeyMismatch"));
    const statement = statementOfBundle(bundle);
    statement.predicate.safetensors_manifest.files[0].tensors[0].sha256 = "0".repeat(64);
    assert.throws(() => verifyEnvelope(withPayload(bundle, statement), publicPem), code("SignatureInvalid"));
    const sig = Buffer.from(bundle.dsseEnvelope.signatures[0]!.sig, "base64");
    sig[3]! ^= 1;
    const badSig = {
      ...bundle,
      dsseEnvelope: { ...bundle.dsseEnvelope, signatures: [{ sig: sig.toString("base64") }] },
    };
    assert.throws(() => verifyEnvelope(badSig, publicPem), code("SignatureInvalid"));
    // The hint is not signed: pointing it at another key does not make another key's signature pass.
    const otherHint = signManifest(
      manifest,
      generateKeyPairSync("ed25519").privateKey.export({ type: "pkcs8", format: "pem" }),
    );
    const relabelled = { ...otherHint, verificationMaterial: bundle.verificationMaterial };
    assert.throws(() => verifyEnvelope(relabelled, publicPem), code("SignatureInvalid"));
    const keyless = { ...bundle, verificationMaterial: { certificate: { rawBytes: "AA==" }, tlogEntries: [] } };
    assert.throws(() => verifyEnvelope(keyless, publicPem), code("SignatureInvalid"));
    const v02 = { ...bundle, mediaType: "application/vnd.dev.sigstore.bundle+json;version=0.2" };
    assert.throws(() => verifyEnvelope(v02, publicPem), code("SignatureInvalid"));
    assert.throws(() => verifyEnvelope({ manifest_version: 1 }, publicPem), code("SignatureInvalid"));
    const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey.export({ type: "spki", format: "pem" });
    assert.throws(() => verifyEnvelope(bundle, rsa as string), code("InvalidOption"));
    const k1 = generateKeyPairSync("ec", { namedCurve: "secp256k1" }).privateKey.export({
      type: "pkcs8",
      format: "pem",
    });
    assert.throws(() => signManifest(manifest, k1), code("InvalidOption"));
    // A re-signed lie: the statement's resources disagree with the manifest inside it.
    const lie = statementOfBundle(bundle);
    lie.predicate.resources[0].digest = "0".repeat(64);
    const { privateKey } = keys;
    const payload = Buffer.from(JSON.stringify(lie));
    const resigned = withPayload(bundle, lie);
    resigned.dsseEnvelope.signatures = [
      { sig: sign(null, preAuthEncoding("application/vnd.in-toto+json", payload), privateKey).toString("base64") },
    ];
    assert.throws(() => verifyEnvelope(resigned, publicPem), code("ManifestInvalid"));
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
    const signedFile = JSON.parse(fs.readFileSync(`${target}.manifest.sig.json`, "utf8"));
    assert.equal(signedFile.mediaType, "application/vnd.dev.sigstore.bundle.v0.3+json");
    const wrong = await cli("manifest", "verify", target, "--pubkey", otherFile);
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /^error\[SignatureKeyMismatch\]/);
    // The bare envelope earlier versions wrote is still accepted.
    const bareFile = fresh(".json");
    fs.writeFileSync(bareFile, JSON.stringify(signedFile.dsseEnvelope));
    assert.equal((await cli("manifest", "verify", target, "-m", bareFile, "--pubkey", pubFile)).code, 0);
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
