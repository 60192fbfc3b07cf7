/** `safetensors manifest create|sign|verify`: integrity manifests and their signatures, Sigstore bundles (src/integrity). */

import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { signedKind, signManifest, verifySignedStatement } from "../integrity/dsse.js";
import {
  createManifest,
  type FileCheck,
  type VerifyReport,
  verifyManifest,
  verifySignedFiles,
} from "../integrity/manifest.js";
import { type Manifest, parseManifest } from "../integrity/manifest-format.js";
import { writeAllAt, writeFileAtomic } from "../io/node-write.js";
import { group, plural } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import type { Io } from "./io.js";

const stem = (target: string) => target.replace(/\/+$/, "");

function readBytes(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (error) {
    throw new SafetensorError("IoError", `cannot read ${file}: ${(error as Error).message}`, { cause: error });
  }
}

function readJson(file: string, code: "ManifestInvalid" | "SignatureInvalid"): unknown {
  const text = readBytes(file).toString("utf8");
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new SafetensorError(code, `${file} is not JSON: ${(error as Error).message}`);
  }
}

function writeText(file: string, text: string): void {
  writeFileAtomic(file, (fd) => writeAllAt(fd, Buffer.from(text, "utf8"), 0));
}

function fileLines(check: FileCheck): string {
  if (check.status === "ok") return "";
  let out = `${check.status}  ${check.name}`;
  if (check.size && check.size.actual !== check.size.expected)
    out += ` (${check.size.expected} -> ${check.size.actual} bytes)`;
  if (check.error) out += `: error[${check.error.code}]: ${check.error.message}`;
  out += "\n";
  for (const t of check.tensors ?? []) out += `  tensor ${t.status}  ${JSON.stringify(t.name)}\n`;
  for (const m of check.metadata ?? []) {
    const how = m.a === undefined ? "added" : m.b === undefined ? "removed" : "changed";
    out += `  metadata ${how}  ${JSON.stringify(m.key)}\n`;
  }
  if (check.headerChanged && !(check.tensors?.length || check.metadata?.length)) out += "  header changed\n";
  return out;
}

function printReport(io: Io, report: VerifyReport, signed: boolean, json: boolean | undefined): number {
  if (json) io.stdout(`${JSON.stringify({ ok: report.ok, signed, files: report.files })}\n`);
  else {
    for (const check of report.files) io.stdout(fileLines(check));
    const tensors = report.files.reduce((n, f) => n + (f.status === "ok" ? 1 : 0), 0);
    io.stdout(
      report.ok
        ? `ok: ${report.files.length} file${report.files.length === 1 ? "" : "s"} match${signed ? ", signature verified" : ""}\n`
        : `FAILED: ${group(report.files.length - tensors)} of ${plural(report.files.length, "file")} ${report.files.length - tensors === 1 ? "differs" : "differ"} from the manifest\n`,
    );
  }
  return report.ok ? 0 : 1;
}

export const command = defineCommand({
  usage:
    "manifest create FILE|DIR [-o OUT]\nmanifest sign MANIFEST --key KEY.pem [-o OUT]\nmanifest verify FILE|DIR [-m MANIFEST] [--pubkey PUB.pem] [--json]",
  description: `Integrity manifests. "create" writes OUT (default FILE.manifest.json, DIR.manifest.json): each file's size
and SHA-256 and, for safetensors files, the header's SHA-256, the metadata and every tensor's dtype, shape, offsets
and SHA-256 (a sharded checkpoint: its index and every shard).

"sign" signs a manifest with a private key in PEM: Ed25519 (openssl genpkey -algorithm ed25519 -out key.pem) or
ECDSA P-256/P-384/P-521 (openssl ecparam -name prime256v1 -genkey -noout -out key.pem; the curves OpenSSF model
signing's key signer takes); the public key: openssl pkey -in key.pem -pubout -out pub.pem. OUT (default MANIFEST
with .json -> .sig.json) is a Sigstore bundle as model signing writes for key-based signing (media type
application/vnd.dev.sigstore.bundle.v0.3+json, verificationMaterial.publicKey.hint = SHA-256 of the public key's
PEM) around a DSSE envelope (payload type application/vnd.in-toto+json) of an in-toto v1 Statement in model
signing's layout (predicate https://model_signing/signature/v1.0: the files as resources, the subject a SHA-256 over
their digests), with the whole manifest, per-tensor digests included, under predicate.safetensors_manifest.

"verify" rehashes FILE or DIR against MANIFEST (default FILE.manifest.json; with --pubkey, FILE.manifest.sig.json,
whose signature must verify with PUB.pem first: a Sigstore bundle, or the bare DSSE envelope earlier versions wrote;
a bundle signed with another key is error[SignatureKeyMismatch], a tampered payload or signature
error[SignatureInvalid]). It names every file that changed, and in it which tensors (changed, missing, added, retyped,
moved) and which metadata keys. A signature OpenSSF model signing made (model_signing sign key; -m DIR/model.sig)
carries no per-tensor manifest: DIR's files are checked against the digests it signed (whole-file SHA-256), every
file it does not list and did not ignore reported as extra. --json prints {"ok","signed","files":[{"name","path","status",...}]}.
Exit status 0 when everything matches, 1 otherwise.`,
  options: {
    output: { type: "string", short: "o", value: "OUT", help: "where to write (create, sign)" },
    manifest: { type: "string", short: "m", value: "MANIFEST", help: "the manifest or signed envelope (verify)" },
    key: { type: "string", value: "KEY.pem", help: "private key, PEM: Ed25519 or ECDSA P-256/384/521 (sign)" },
    pubkey: { type: "string", value: "PUB.pem", help: "public key, PEM: check the signature (verify)" },
    json: { type: "boolean", help: "print the verification report as JSON" },
  },
  run({ values, positionals }, { io }) {
    const [action, ...args] = positionals;
    if (action === "create") {
      if (args.length !== 1) throw new UsageError("manifest create takes FILE or DIR");
      const out = values.output ?? `${stem(args[0]!)}.manifest.json`;
      const manifest = createManifest(args[0]!);
      writeText(out, `${JSON.stringify(manifest, null, 1)}\n`);
      const tensors = manifest.files.reduce((n, f) => n + (f.tensors?.length ?? 0), 0);
      io.stdout(`wrote ${out} (${plural(manifest.files.length, "file")}, ${plural(tensors, "tensor")})\n`);
      return 0;
    }
    if (action === "sign") {
      if (args.length !== 1 || values.key === undefined)
        throw new UsageError("manifest sign takes MANIFEST and --key KEY.pem");
      const manifest = parseManifest(readJson(args[0]!, "ManifestInvalid"));
      const key = readBytes(values.key);
      const out = values.output ?? `${args[0]!.replace(/\.json$/, "")}.sig.json`;
      writeText(out, `${JSON.stringify(signManifest(manifest, key), null, 1)}\n`);
      io.stdout(`wrote ${out}\n`);
      return 0;
    }
    if (action === "verify") {
      if (args.length !== 1) throw new UsageError("manifest verify takes FILE or DIR");
      const signed = values.pubkey !== undefined;
      const file = values.manifest ?? `${stem(args[0]!)}.manifest${signed ? ".sig" : ""}.json`;
      const parsed = readJson(file, signed ? "SignatureInvalid" : "ManifestInvalid");
      let manifest: Manifest;
      if (signed) {
        if (!signedKind(parsed))
          throw new SafetensorError("SignatureInvalid", `${file} is not signed (no Sigstore bundle or DSSE envelope)`);
        const statement = verifySignedStatement(parsed, readBytes(values.pubkey!));
        if (statement.manifest === null) {
          // Signed by model signing itself: its files, against the digests the signature covers.
          const inside = path.relative(args[0]!, file);
          const ignore = inside.startsWith("..") || path.isAbsolute(inside) ? [] : [inside.split(path.sep).join("/")];
          return printReport(io, verifySignedFiles(args[0]!, statement, { ignore }), signed, values.json);
        }
        manifest = statement.manifest;
      } else {
        const kind = signedKind(parsed);
        if (kind)
          throw new UsageError(
            `${file} is a signed ${kind === "bundle" ? "Sigstore bundle" : "envelope"}: pass --pubkey PUB.pem to verify it`,
          );
        manifest = parseManifest(parsed);
      }
      return printReport(io, verifyManifest(args[0]!, manifest), signed, values.json);
    }
    throw new UsageError("manifest takes create, sign or verify");
  },
});
