#!/usr/bin/env node
/**
 * `npm run test:fast`: every suite in test/ but the slow ones below, in under a minute on a 2-core machine: the format
 * and its codecs, the readers and writers over memory, files and the corpus, slicing, shards, edits and their
 * journals, integrity, pickle and GGUF parsing, the CLI in process, the docs' examples and the layering rules. Left out:
 * what starts browsers, Python, npm or many processes, and the crash and fuzz runs (SLOW says which and why).
 * `npm test` runs them all (scripts/run-tests.mjs). A new suite is fast until it is listed here; list it when it takes
 * more than a few seconds alone.
 */
import { runTests, testFiles } from "./run-tests.mjs";

/**
 * Suites left out, each with what makes it slow: more than ~6 s alone on a 2-core machine under load, where the
 * ones kept take 2-6 s (mostly tsx's start-up).
 */
const SLOW = {
  "package.test.ts": "packs the package and installs it in scratch projects",
  "cli-manners.test.ts": "a process per CLI case",
  "cli.test.ts": "a process per CLI case, over the whole corpus",
  "cli-remote.test.ts": "CLI processes against HTTP servers",
  "reference-skip.test.ts": "checks of the skip paths in child processes",
  "crash.test.ts": "writers killed mid-write, hundreds of trials",
  "edit-crash.test.ts": "editors killed mid-edit",
  "shards-reference.test.ts": "the reference implementation in Python",
  "interop.test.ts": "the reference implementation in Python",
  "edit-numpy.test.ts": "numpy in Python",
  "numpy-diffcheck.test.ts": "numpy in Python",
  "pickle-dir.test.ts": "PyTorch directories converted, checked against torch",
  "pickle.test.ts": "PyTorch checkpoints converted, checked against torch",
  "file.test.ts": "files over 4 GiB (sparse) on every backend",
  "save-over.test.ts": "readers held across rewrites in child processes",
  "save-direct.test.ts": "O_DIRECT writes of many alignments",
  "syntax-hint.test.ts": "large hostile headers",
  "hostile.test.ts": "hostile headers past the sizes that once crashed",
  "browser.test.ts": "headless Chromium",
  "inspector.test.ts": "headless Chromium",
  "s3.test.ts": "a local S3 server and botocore",
  "http.test.ts": "nginx",
  "view-server.test.ts": "the inspector's server over the corpus",
  "rank.test.ts": "HTTP servers, many plans",
  "mask.test.ts": "masks over every dtype and layout",
  "patch.test.ts": "random edits of corpus files",
  "rewrite.test.ts": "the byte-copy commands over the corpus",
  "fuzz.test.ts": "fuzzing in worker threads",
  "bench-harness.test.ts": "the reference's twins of inspect and hash in Python",
  "digests.test.ts": "worker-thread lanes over large inputs",
  "owned.test.ts": "owned copies on every backend, with and without the addon",
  "journal.test.ts": "journals in child processes",
  "manifest.test.ts": "flipped bytes in every tensor of real files",
  "merge.test.ts": "merges killed mid-commit in child processes; transformers' logits in Python",
  "lora.test.ts": "transformers' logits in Python",
  "lora-extract.test.ts": "PEFT in Python loads and merges the extracted adapters (33.5 s at load ~7)",
  "gguf-unseen.test.ts": "fresh models made by transformers in Python, read by gguf-py, run by llama.cpp",
  "api-docs.test.ts": "TypeDoc over the whole public API (~8 s of CPU)",
  "docs-tasks.test.ts": "five scripts written from the docs, each a process, and a tsc run over them",
  "gguf-convert.test.ts": "GGUF conversions of the fixture models, every quantization (~17 s)",
  "kohya.test.ts": "kohya LoRA bakes checked against their fixtures (~11 s)",
  "get-npy.test.ts": "numpy in Python",
  "runtimes.test.ts": "Bun and Deno processes",
  "gpu-acceptance.test.ts": "headless Chromium",
  "gpu-browser.test.ts": "headless Chromium",
  "gpu-cache.test.ts": "headless Chromium",
  "gpu-example.test.ts": "headless Chromium",
};

const files = testFiles().filter((file) => !(file.slice("test/".length) in SLOW));
process.exitCode = await runTests(files, process.argv.slice(2));
