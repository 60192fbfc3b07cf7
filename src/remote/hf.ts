/**
 * `hf://` locations resolved like the Hugging Face Hub: `hf://[datasets/|spaces/]ORG/REPO[@REV]/PATH` →
 * `{endpoint}/[datasets/|spaces/]ORG/REPO/resolve/{REV}/{PATH}` (REV default "main"; "refs/pr/N" and
 * "refs/convert/…" revisions may be written with their slashes). Pure.
 */
import { SafetensorError } from "../format/errors.js";

/** The Hugging Face Hub's address, used for `hf://` locations unless `hfEndpoint` (or HF_ENDPOINT) names another. */
export const DEFAULT_HF_ENDPOINT = "https://huggingface.co";

/** Hugging Face Hub settings for `hf://` locations. */
export interface HfOptions {
  /** The Hub's address (default https://huggingface.co; the CLI and Node `open` read HF_ENDPOINT). */
  hfEndpoint?: string;
  /** A Hub token, sent as `Authorization: Bearer …` (the CLI and Node `open` read HF_TOKEN). */
  hfToken?: string;
}

/** An `hf://` location: the repository, its type, the revision and the path inside it. */
export interface HfLocation {
  readonly repoType: "model" | "dataset" | "space";
  readonly repo: string;
  readonly revision: string;
  readonly path: string;
}

/** Parse `hf://…` into repo, revision and path in the repo. */
export function parseHfUrl(spec: string): HfLocation {
  const bad = (why: string) =>
    new SafetensorError("InvalidOption", `${why}: ${JSON.stringify(spec)} (expected hf://ORG/REPO[@REV]/PATH)`);
  if (!/^hf:\/\//i.test(spec)) throw bad("not an hf:// location");
  const parts = spec.slice(5).split("/");
  let repoType: HfLocation["repoType"] = "model";
  if (parts[0] === "datasets" || parts[0] === "spaces") {
    repoType = parts[0] === "datasets" ? "dataset" : "space";
    parts.shift();
  }
  if (parts.length < 3) throw bad("an hf:// location needs ORG/REPO and a path in it");
  const org = parts.shift()!;
  let name = parts.shift()!;
  let revision = "main";
  const at = name.indexOf("@");
  if (at >= 0) {
    revision = name.slice(at + 1);
    name = name.slice(0, at);
    // "refs/pr/1", "refs/convert/parquet": the revision continues over two more segments.
    if (revision === "refs" && parts.length > 2) revision = `refs/${parts.shift()}/${parts.shift()}`;
  }
  const path = parts.join("/");
  if (org === "" || name === "" || revision === "" || path === "" || parts.some((p) => p === "" || p === "..")) {
    throw bad("empty or unsafe part in hf:// location");
  }
  return { repoType, repo: `${org}/${name}`, revision, path };
}

/** The URL and headers that fetch an hf:// location's bytes. */
export function resolveHfUrl(spec: string, options: HfOptions = {}): { url: string; headers: Headers } {
  const { repoType, repo, revision, path } = parseHfUrl(spec);
  const endpoint = (options.hfEndpoint || DEFAULT_HF_ENDPOINT).replace(/\/+$/, "");
  const prefix = repoType === "model" ? "" : `${repoType}s/`;
  const encodedPath = path.split("/").map(encodeURIComponent).join("/");
  const url = `${endpoint}/${prefix}${repo}/resolve/${encodeURIComponent(revision)}/${encodedPath}`;
  const headers = new Headers();
  if (options.hfToken) headers.set("Authorization", `Bearer ${options.hfToken}`);
  return { url, headers };
}
