/**
 * `s3://BUCKET/KEY` for S3 and S3-compatible stores: plain HTTP range reads, signed with AWS Signature V4 by
 * `aws4fetch` when credentials are given (unsigned otherwise: public buckets). Presigned URLs need none of this:
 * they are plain https:// URLs. Used by the Node entry and the CLI, which read the AWS_* environment variables.
 */
import type { AwsClient } from "aws4fetch";
import { SafetensorError } from "../format/errors.js";
import type { HttpOptions } from "./http.js";

/** S3 settings for `s3://` locations (Node); unset ones come from the AWS environment variables. */
export interface S3Options {
  /** An S3-compatible endpoint such as http://127.0.0.1:9000 (path-style URLs); default AWS (virtual-hosted). */
  s3Endpoint?: string;
  /** Default us-east-1. */
  s3Region?: string;
  s3AccessKeyId?: string;
  s3SecretAccessKey?: string;
  s3SessionToken?: string;
}

export function parseS3Url(spec: string): { bucket: string; key: string } {
  const match = /^s3:\/\/([^/]+)\/(.+)$/i.exec(spec);
  if (!match) throw new SafetensorError("InvalidOption", `expected s3://BUCKET/KEY, got ${JSON.stringify(spec)}`);
  return { bucket: match[1]!, key: match[2]! };
}

/** RFC 3986 encoding of each key segment, as S3's canonical URI wants it. */
function encodeKey(key: string): string {
  return key
    .split("/")
    .map((part) =>
      encodeURIComponent(part).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`),
    )
    .join("/");
}

/** The object's URL: path-style on a custom endpoint or for bucket names with dots, virtual-hosted on AWS. */
export function s3ObjectUrl(spec: string, options: S3Options = {}): string {
  const { bucket, key } = parseS3Url(spec);
  const region = options.s3Region || "us-east-1";
  if (options.s3Endpoint) return `${options.s3Endpoint.replace(/\/+$/, "")}/${bucket}/${encodeKey(key)}`;
  if (bucket.includes(".")) return `https://s3.${region}.amazonaws.com/${bucket}/${encodeKey(key)}`;
  return `https://${bucket}.s3.${region}.amazonaws.com/${encodeKey(key)}`;
}

type FetchFn = NonNullable<HttpOptions["fetch"]>;

/**
 * A `fetch` that signs each request (SigV4, service s3) before handing it to `inner`. aws4fetch is loaded with the
 * first request, so that importing the package does not load it.
 */
export function signingFetch(options: S3Options, inner: FetchFn = globalThis.fetch): FetchFn {
  if (!options.s3AccessKeyId || !options.s3SecretAccessKey) {
    throw new SafetensorError("InvalidOption", "S3 signing needs an access key id and a secret access key");
  }
  const settings = {
    accessKeyId: options.s3AccessKeyId,
    secretAccessKey: options.s3SecretAccessKey,
    sessionToken: options.s3SessionToken,
    service: "s3",
    region: options.s3Region || "us-east-1",
    // No retries inside the signer: the HTTP source retries, re-signing each attempt through this function.
    retries: 0,
  };
  let client: Promise<AwsClient> | undefined;
  return async (input, init) => {
    client ??= import("aws4fetch").then(({ AwsClient }) => new AwsClient(settings));
    return inner(await (await client).sign(input instanceof Request ? input : input.toString(), init));
  };
}

/** URL and HTTP options that read `s3://BUCKET/KEY`. */
export function resolveS3(spec: string, options: S3Options & HttpOptions = {}): { url: string; http: HttpOptions } {
  const url = s3ObjectUrl(spec, options);
  const signed = options.s3AccessKeyId && options.s3SecretAccessKey;
  return { url, http: signed ? { ...options, fetch: signingFetch(options, options.fetch) } : options };
}
