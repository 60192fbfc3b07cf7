/**
 * Signed manifests the way OpenSSF model signing (sigstore/model-transparency) writes them when it signs with a key:
 * a Sigstore bundle (media type `application/vnd.dev.sigstore.bundle.v0.3+json`) whose verification material is
 * `publicKey.hint` (hex SHA-256 of the public key's SPKI PEM, no transparency-log entries) around a DSSE envelope
 * (payload type `application/vnd.in-toto+json`, signature over DSSE's pre-authentication encoding) of an in-toto v1
 * Statement: subject the model's name with a SHA-256 over its files' digests, predicate type
 * `https://model_signing/signature/v1.0`, predicate `{serialization, resources:[{name, algorithm, digest}]}` with the
 * files sorted by name. Our extension: the whole manifest (every tensor's digest, dtype, shape; metadata) under
 * `predicate.safetensors_manifest`, which v1.0 verifiers ignore. Keys: Ed25519, or ECDSA on P-256/P-384/P-521 with
 * SHA-256/384/512 and DER signatures (model signing's key signer takes only these curves). Verification also takes
 * the bare envelope earlier versions wrote. Node-only (node:crypto).
 */
import { createHash, createPrivateKey, createPublicKey, type KeyObject, sign, verify } from "node:crypto";
import { SafetensorError } from "../format/errors.js";
import { compareCodePoints } from "../format/serialize.js";
import { type Manifest, parseManifest } from "./manifest-format.js";

export const SIGSTORE_BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json";
export const IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json";
export const IN_TOTO_STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
export const MODEL_SIGNING_PREDICATE_TYPE = "https://model_signing/signature/v1.0";

/** A DSSE envelope: a payload, its type, and signatures over its pre-authentication encoding. */
export interface DsseEnvelope {
  payloadType: string;
  /** Base64 of the payload bytes. */
  payload: string;
  /** `keyid`: the bare envelopes of earlier versions carried SHA-256 of the key's SPKI DER; bundles leave it empty. */
  signatures: { keyid?: string; sig: string }[];
}

/** A Sigstore bundle holding a DSSE envelope, verified with a key known out of band (`publicKey.hint`). */
export interface SigstoreBundle {
  mediaType: string;
  verificationMaterial: { publicKey: { hint: string }; tlogEntries: unknown[] };
  dsseEnvelope: DsseEnvelope;
}

/** DSSE v1 pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body (LEN in ASCII decimal). */
export function preAuthEncoding(payloadType: string, payload: Uint8Array): Uint8Array {
  const type = Buffer.from(payloadType, "utf8");
  return Buffer.concat([Buffer.from(`DSSEv1 ${type.length} `), type, Buffer.from(` ${payload.length} `), payload]);
}

/** model-signing's subject digest: SHA-256 over the resources' raw digests, in their (name-sorted) order. */
function rootDigest(resources: readonly { digest: string }[]): string {
  const hash = createHash("sha256");
  for (const resource of resources) hash.update(Buffer.from(resource.digest, "hex"));
  return hash.digest("hex");
}

function resourcesOf(manifest: Manifest) {
  return manifest.files
    .map((file) => ({ name: file.name, algorithm: "sha256", digest: file.sha256 }))
    .sort((a, b) => compareCodePoints(a.name, b.name));
}

/** The in-toto Statement for a manifest. */
export function statementOf(manifest: Manifest): Record<string, unknown> {
  const resources = resourcesOf(manifest);
  return {
    _type: IN_TOTO_STATEMENT_TYPE,
    subject: [{ name: manifest.model, digest: { sha256: rootDigest(resources) } }],
    predicateType: MODEL_SIGNING_PREDICATE_TYPE,
    predicate: {
      // model signing writes ignore_paths only when there are some.
      serialization: { method: "files", hash_type: "sha256", allow_symlinks: false },
      resources,
      safetensors_manifest: manifest,
    },
  };
}

/** The digest an ECDSA key signs with, by curve (model signing's choice); Ed25519 takes none. */
const EC_HASHES: Record<string, string> = { prime256v1: "sha256", secp384r1: "sha384", secp521r1: "sha512" };

/** A signing or verifying key from PEM (private: PKCS#8 or SEC1; public: SPKI, or a private key it is derived from). */
function keyFrom(pem: string | Uint8Array, kind: "private" | "public"): { key: KeyObject; hash: string | null } {
  let key: KeyObject;
  try {
    const input = typeof pem === "string" ? pem : Buffer.from(pem);
    key = kind === "private" ? createPrivateKey(input) : createPublicKey(input);
  } catch (error) {
    throw new SafetensorError("InvalidOption", `cannot read the ${kind} key: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (key.asymmetricKeyType === "ed25519") return { key, hash: null };
  const curve = key.asymmetricKeyDetails?.namedCurve;
  if (key.asymmetricKeyType === "ec" && curve !== undefined && EC_HASHES[curve])
    return { key, hash: EC_HASHES[curve]! };
  const what = key.asymmetricKeyType === "ec" ? `an EC key on ${curve}` : `a ${key.asymmetricKeyType} key`;
  throw new SafetensorError(
    "InvalidOption",
    `the ${kind} key is ${what}; Ed25519 and ECDSA P-256/P-384/P-521 keys only`,
  );
}

/** A bare envelope's key id: SHA-256 of the public key's SubjectPublicKeyInfo (DER), hex. */
function keyId(publicKey: KeyObject): string {
  return createHash("sha256")
    .update(publicKey.export({ type: "spki", format: "der" }))
    .digest("hex");
}

/** A bundle's key hint, as model signing computes it: SHA-256 of the public key's SPKI PEM text, hex. */
function keyHint(publicKey: KeyObject): string {
  return createHash("sha256")
    .update(publicKey.export({ type: "spki", format: "pem" }) as string)
    .digest("hex");
}

/**
 * Sign a manifest with a private key (PEM: Ed25519, or ECDSA P-256/P-384/P-521): a Sigstore bundle around a DSSE
 * envelope of its in-toto Statement, as model signing writes for key-based signing.
 */
export function signManifest(manifest: Manifest, privateKeyPem: string | Uint8Array): SigstoreBundle {
  const { key, hash } = keyFrom(privateKeyPem, "private");
  const payload = Buffer.from(JSON.stringify(statementOf(manifest)), "utf8");
  const message = preAuthEncoding(IN_TOTO_PAYLOAD_TYPE, payload);
  const sig = hash === null ? sign(null, message, key) : sign(hash, message, { key, dsaEncoding: "der" });
  return {
    mediaType: SIGSTORE_BUNDLE_MEDIA_TYPE,
    verificationMaterial: { publicKey: { hint: keyHint(createPublicKey(key)) }, tlogEntries: [] },
    dsseEnvelope: {
      payload: payload.toString("base64"),
      payloadType: IN_TOTO_PAYLOAD_TYPE,
      // An empty keyid, as model signing writes it (the key is named by the hint).
      signatures: [{ sig: sig.toString("base64"), keyid: "" }],
    },
  };
}

function refused(message: string): never {
  throw new SafetensorError("SignatureInvalid", message);
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null;

/** What a parsed JSON value is: a Sigstore bundle, a bare DSSE envelope, or neither (a plain manifest, say). */
export function signedKind(value: unknown): "bundle" | "envelope" | null {
  if (!isObject(value)) return null;
  if ("mediaType" in value && "dsseEnvelope" in value) return "bundle";
  if ("payloadType" in value && "signatures" in value) return "envelope";
  if ("mediaType" in value && String(value.mediaType).startsWith("application/vnd.dev.sigstore.bundle"))
    return "bundle";
  return null;
}

/** The envelope inside a bundle, once the bundle is one this key can have signed (else refused). */
function envelopeOfBundle(bundle: Record<string, unknown>, publicKey: KeyObject): unknown {
  if (bundle.mediaType !== SIGSTORE_BUNDLE_MEDIA_TYPE) {
    refused(`bundle media type ${String(bundle.mediaType)}, not ${SIGSTORE_BUNDLE_MEDIA_TYPE}`);
  }
  const material = bundle.verificationMaterial;
  if (!isObject(material) || !isObject(material.publicKey)) {
    refused(
      "the bundle is not signed with a key (a certificate-based, keyless Sigstore bundle needs a Sigstore verifier)",
    );
  }
  const hint = material.publicKey.hint;
  // model signing refuses a hint that is not this key's before checking the signature; so do we. (An absent hint
  // is what its older versions wrote.)
  if (hint !== undefined && hint !== null && hint !== "" && hint !== keyHint(publicKey)) {
    throw new SafetensorError(
      "SignatureKeyMismatch",
      `the bundle was signed with another key (key hint ${String(hint)}, this key's is ${keyHint(publicKey)})`,
    );
  }
  if (!isObject(bundle.dsseEnvelope)) refused("the bundle holds no DSSE envelope");
  return bundle.dsseEnvelope;
}

/** One file a signed statement lists: its path relative to the model (POSIX separators) and SHA-256. */
export interface SignedResource {
  readonly name: string;
  readonly digest: string;
}

/** What a signature that verifies vouches for. */
export interface SignedStatement {
  /** The files, as listed (model signing sorts them by name). */
  readonly resources: readonly SignedResource[];
  /** The paths, relative to the model, that were left out when it was signed (`serialization.ignore_paths`). */
  readonly ignorePaths: readonly string[];
  /** Our extension (`predicate.safetensors_manifest`), checked against the resources; null in a statement without it. */
  readonly manifest: Manifest | null;
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/** The statement's resources, checked to be the file digests its subject digest is over. */
function signedResources(predicate: Record<string, unknown>, subject: unknown): SignedResource[] {
  const serialization = isObject(predicate.serialization) ? predicate.serialization : {};
  if (serialization.method !== "files" || (serialization.hash_type ?? "sha256") !== "sha256") {
    throw new SafetensorError(
      "ManifestInvalid",
      `the signature verifies, but its serialization (method ${String(serialization.method)}, hash ` +
        `${String(serialization.hash_type)}) is not the whole-file SHA-256 one this verifier checks`,
    );
  }
  const resources = predicate.resources;
  if (
    !Array.isArray(resources) ||
    !resources.every(
      (r) =>
        isObject(r) &&
        typeof r.name === "string" &&
        r.name !== "" &&
        (r.algorithm ?? "sha256") === "sha256" &&
        typeof r.digest === "string" &&
        SHA256_HEX.test(r.digest),
    )
  ) {
    throw new SafetensorError(
      "ManifestInvalid",
      "the signed statement's resources are not {name, sha256 digest} files",
    );
  }
  const listed = (resources as { name: string; digest: string }[]).map(({ name, digest }) => ({ name, digest }));
  const digest = Array.isArray(subject) && isObject(subject[0]) ? subject[0].digest : undefined;
  if (!isObject(digest) || digest.sha256 !== rootDigest(listed)) {
    throw new SafetensorError("ManifestInvalid", "the signed statement's subject digest is not over its resources");
  }
  return listed;
}

/**
 * Verify a Sigstore bundle or a bare DSSE envelope with a public key (PEM) and return what its statement vouches
 * for: the files and their digests, and our manifest when it carries one. `SignatureKeyMismatch`: the bundle's key
 * hint (or the envelope's key id) names another key. `SignatureInvalid`: no signature verifies with this key (a
 * tampered payload or signature), another media, payload or statement type, a keyless bundle. `ManifestInvalid`:
 * the statement verifies but is inconsistent (its subject digest is not over its resources, the resources disagree
 * with the manifest inside) or hashes files another way than whole-file SHA-256.
 */
export function verifySignedStatement(signed: unknown, publicKeyPem: string | Uint8Array): SignedStatement {
  const { key, hash } = keyFrom(publicKeyPem, "public");
  const kind = signedKind(signed);
  if (kind === null) refused("not a signed manifest (neither a Sigstore bundle nor a DSSE envelope)");
  const envelope = kind === "bundle" ? envelopeOfBundle(signed as Record<string, unknown>, key) : signed;
  const env = envelope as Partial<DsseEnvelope>;
  if (typeof env.payloadType !== "string" || typeof env.payload !== "string" || !Array.isArray(env.signatures)) {
    refused("not a DSSE envelope (payloadType, payload, signatures)");
  }
  if (!BASE64.test(env.payload)) refused("the payload is not base64");
  const payload = Buffer.from(env.payload, "base64");
  const message = preAuthEncoding(env.payloadType, payload);
  const verified = env.signatures.some((entry) => {
    if (typeof entry?.sig !== "string" || !BASE64.test(entry.sig)) return false;
    const sig = Buffer.from(entry.sig, "base64");
    return hash === null ? verify(null, message, key, sig) : verify(hash, message, { key, dsaEncoding: "der" }, sig);
  });
  if (!verified) {
    const ids = env.signatures.map((entry) => entry?.keyid).filter((id) => typeof id === "string" && id !== "");
    if (kind === "envelope" && ids.length > 0 && !ids.includes(keyId(key))) {
      throw new SafetensorError("SignatureKeyMismatch", `the envelope was signed with another key (key id ${ids[0]})`);
    }
    refused("no signature verifies with this public key (a tampered payload or signature, or another key)");
  }
  if (env.payloadType !== IN_TOTO_PAYLOAD_TYPE) refused(`payload type ${env.payloadType}, not ${IN_TOTO_PAYLOAD_TYPE}`);
  let statement: Record<string, unknown>;
  try {
    statement = JSON.parse(payload.toString("utf8"));
  } catch {
    refused("the signed payload is not JSON");
  }
  if (!isObject(statement) || statement._type !== IN_TOTO_STATEMENT_TYPE) {
    refused(`statement type ${String((statement as { _type?: unknown } | null)?._type)}`);
  }
  if (statement.predicateType !== MODEL_SIGNING_PREDICATE_TYPE) {
    refused(`predicate type ${String(statement.predicateType)}, not ${MODEL_SIGNING_PREDICATE_TYPE}`);
  }
  const predicate = isObject(statement.predicate) ? statement.predicate : {};
  const resources = signedResources(predicate, statement.subject);
  const ignored = isObject(predicate.serialization) ? predicate.serialization.ignore_paths : undefined;
  const ignorePaths = Array.isArray(ignored) ? ignored.filter((p): p is string => typeof p === "string") : [];
  if (predicate.safetensors_manifest === undefined) return { resources, ignorePaths, manifest: null };
  const manifest = parseManifest(predicate.safetensors_manifest);
  const expected = resourcesOf(manifest);
  if (JSON.stringify(resources) !== JSON.stringify(expected.map(({ name, digest }) => ({ name, digest })))) {
    throw new SafetensorError("ManifestInvalid", "the signed statement's digests disagree with its manifest");
  }
  return { resources, ignorePaths, manifest };
}

/**
 * Verify a signed manifest (see `verifySignedStatement`) and return the manifest it carries; `ManifestInvalid` for
 * a statement without one (signed by another tool, such as model signing itself: check its files with
 * `verifySignedStatement` and `verifySignedFiles`).
 */
export function verifyEnvelope(signed: unknown, publicKeyPem: string | Uint8Array): Manifest {
  const { manifest } = verifySignedStatement(signed, publicKeyPem);
  if (manifest === null) {
    throw new SafetensorError(
      "ManifestInvalid",
      "the signature verifies, but the statement carries no safetensors manifest (predicate.safetensors_manifest): " +
        "signed by another tool, such as model_signing itself; its files can be checked against its resources",
    );
  }
  return manifest;
}
