/**
 * Signed manifests in the layout OpenSSF model signing (sigstore/model-transparency) uses: an in-toto v1 Statement
 * whose subject is the model's name with a SHA-256 over its files' digests, predicate type
 * `https://model_signing/signature/v1.0`, predicate `{serialization, resources:[{name, algorithm, digest}]}` with the
 * files sorted by name; the Statement is the payload of a DSSE envelope signed with Ed25519 (node:crypto) over DSSE's
 * pre-authentication encoding. Our extension: the whole manifest (every tensor's digest, dtype, shape; metadata)
 * under `predicate.safetensors_manifest`, which v1.0 verifiers ignore. model-signing wraps the envelope in a Sigstore
 * bundle; here it is written bare. Node-only.
 */
import { createHash, createPrivateKey, createPublicKey, type KeyObject, sign, verify } from "node:crypto";
import { SafetensorError } from "../format/errors.js";
import { type Manifest, parseManifest } from "./manifest-format.js";

export const IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json";
export const IN_TOTO_STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
export const MODEL_SIGNING_PREDICATE_TYPE = "https://model_signing/signature/v1.0";

export interface DsseEnvelope {
  payloadType: string;
  /** Base64 of the payload bytes. */
  payload: string;
  signatures: { keyid: string; sig: string }[];
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
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The in-toto Statement for a manifest. */
export function statementOf(manifest: Manifest): Record<string, unknown> {
  const resources = resourcesOf(manifest);
  return {
    _type: IN_TOTO_STATEMENT_TYPE,
    subject: [{ name: manifest.model, digest: { sha256: rootDigest(resources) } }],
    predicateType: MODEL_SIGNING_PREDICATE_TYPE,
    predicate: {
      serialization: { method: "files", hash_type: "sha256", allow_symlinks: false, ignore_paths: [] },
      resources,
      safetensors_manifest: manifest,
    },
  };
}

/** An Ed25519 key from PEM (private: PKCS#8; public: SPKI, or a private key it is derived from). */
function ed25519(pem: string | Uint8Array, kind: "private" | "public"): KeyObject {
  let key: KeyObject;
  try {
    const input = typeof pem === "string" ? pem : Buffer.from(pem);
    key = kind === "private" ? createPrivateKey(input) : createPublicKey(input);
  } catch (error) {
    throw new SafetensorError("InvalidOption", `cannot read the ${kind} key: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new SafetensorError("InvalidOption", `the ${kind} key is a ${key.asymmetricKeyType} key; Ed25519 keys only`);
  }
  return key;
}

/** A key id: SHA-256 of the public key's SubjectPublicKeyInfo (DER), hex. */
function keyId(publicKey: KeyObject): string {
  return createHash("sha256")
    .update(publicKey.export({ type: "spki", format: "der" }))
    .digest("hex");
}

/** Sign a manifest with an Ed25519 private key (PEM, PKCS#8): a DSSE envelope over its in-toto Statement. */
export function signManifest(manifest: Manifest, privateKeyPem: string | Uint8Array): DsseEnvelope {
  const key = ed25519(privateKeyPem, "private");
  const payload = Buffer.from(JSON.stringify(statementOf(manifest)), "utf8");
  const sig = sign(null, preAuthEncoding(IN_TOTO_PAYLOAD_TYPE, payload), key);
  return {
    payloadType: IN_TOTO_PAYLOAD_TYPE,
    payload: payload.toString("base64"),
    signatures: [{ keyid: keyId(createPublicKey(key)), sig: sig.toString("base64") }],
  };
}

function refused(message: string): never {
  throw new SafetensorError("SignatureInvalid", message);
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Whether a parsed JSON value looks like a DSSE envelope (rather than a plain manifest). */
export function isEnvelope(value: unknown): boolean {
  return typeof value === "object" && value !== null && "payloadType" in value && "signatures" in value;
}

/**
 * Verify a DSSE envelope with an Ed25519 public key (PEM) and return the manifest it carries. Refused
 * (`SignatureInvalid`): no signature verifies with this key (wrong key, tampered payload or signature), another
 * payload type or statement type. `ManifestInvalid`: the statement verifies but is inconsistent (its subject digest
 * is not over its resources, or the resources disagree with the manifest inside).
 */
export function verifyEnvelope(envelope: unknown, publicKeyPem: string | Uint8Array): Manifest {
  const key = ed25519(publicKeyPem, "public");
  const env = envelope as Partial<DsseEnvelope>;
  if (typeof env.payloadType !== "string" || typeof env.payload !== "string" || !Array.isArray(env.signatures)) {
    refused("not a DSSE envelope (payloadType, payload, signatures)");
  }
  if (!BASE64.test(env.payload)) refused("the payload is not base64");
  const payload = Buffer.from(env.payload, "base64");
  const message = preAuthEncoding(env.payloadType, payload);
  const verified = env.signatures.some((entry) => {
    if (typeof entry?.sig !== "string" || !BASE64.test(entry.sig)) return false;
    return verify(null, message, key, Buffer.from(entry.sig, "base64"));
  });
  if (!verified) refused("no signature verifies with this public key (wrong key, or a tampered payload or signature)");
  if (env.payloadType !== IN_TOTO_PAYLOAD_TYPE) refused(`payload type ${env.payloadType}, not ${IN_TOTO_PAYLOAD_TYPE}`);
  let statement: {
    _type?: unknown;
    predicateType?: unknown;
    subject?: { digest?: { sha256?: unknown } }[];
    predicate?: { resources?: { name: string; digest: string }[]; safetensors_manifest?: unknown };
  };
  try {
    statement = JSON.parse(payload.toString("utf8"));
  } catch {
    refused("the signed payload is not JSON");
  }
  if (statement._type !== IN_TOTO_STATEMENT_TYPE) refused(`statement type ${String(statement._type)}`);
  if (statement.predicateType !== MODEL_SIGNING_PREDICATE_TYPE) {
    refused(`predicate type ${String(statement.predicateType)}, not ${MODEL_SIGNING_PREDICATE_TYPE}`);
  }
  const manifest = parseManifest(statement.predicate?.safetensors_manifest);
  const resources = statement.predicate?.resources;
  const expected = resourcesOf(manifest);
  if (
    !Array.isArray(resources) ||
    JSON.stringify(resources) !== JSON.stringify(expected) ||
    statement.subject?.[0]?.digest?.sha256 !== rootDigest(expected)
  ) {
    throw new SafetensorError("ManifestInvalid", "the signed statement's digests disagree with its manifest");
  }
  return manifest;
}
