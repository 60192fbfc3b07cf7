/** `safetensors lora extract`: a PEFT LoRA adapter from TUNED − BASE by truncated SVD (the `lora` command's action). */
import { extractLora } from "../merge/node-extract.js";
import type { OptionSpecs } from "./args.js";
import { UsageError } from "./args.js";
import type { Io } from "./io.js";
import { runWithProgress } from "./rewrite.js";

export const EXTRACT_USAGE =
  "lora extract BASE TUNED OUTDIR --rank R [--sv-epsilon E] [--embed-lora] [--save-module NAME]... [--include REGEX]... [--exclude REGEX]... [--skip-undecomposable] [--no-distribute-scale] [--strict-rank] [--svd auto|exact|randomized] [--seed N] [--dtype f32|f16|bf16] [--json]";

export const EXTRACT_DESCRIPTION = `lora extract: the difference TUNED - BASE (two checkpoints of the same architecture: directories, index or
.safetensors files, local or remote) as a PEFT LoRA adapter in OUTDIR (adapter_config.json and
adapter_model.safetensors, which PeftModel.from_pretrained loads), as mergekit-extract-lora makes it. Each linear
layer's update becomes its best rank-R approximation (truncated SVD): lora_A = sqrt(S) V^T, lora_B = U sqrt(S)
(--no-distribute-scale: lora_A = S V^T, lora_B = U), r = lora_alpha, so the adapter adds exactly the approximation.
A module smaller than R gets its own smaller rank (rank_pattern); --strict-rank refuses it instead; --sv-epsilon
drops singular values at or below E. Embeddings and lm_head are saved whole (modules_to_save) unless --embed-lora;
norms and other weights that are not linear layers are saved whole unless --skip-undecomposable. Bias changes
go into lora_B.bias (lora_bias) when every factored module has a bias; otherwise PEFT cannot apply them and they
are left out with a warning. --json lists each module's rank and the share of its update the rank
retains ("retained": 1 - (error / |dW|)^2, Frobenius norms).

The SVD is exact (Gram matrix in float64, Householder + QL) while a matrix is small enough to take seconds
(m * n * min(m, n) <= 2^29, e.g. 512 x 2048), randomized above (seeded subspace iteration, 4 power passes: near-optimal error);
--svd chooses. One module is in memory at a time; OUTDIR is committed at once.`;

export const EXTRACT_OPTIONS = {
  rank: { type: "string", value: "R", help: "lora extract: the largest rank of a module's factors (required)" },
  "sv-epsilon": { type: "string", value: "E", help: "lora extract: drop singular values at or below E (default 0)" },
  "embed-lora": { type: "boolean", help: "lora extract: factor the embeddings too instead of saving them whole" },
  "save-module": {
    type: "string",
    multiple: true,
    value: "NAME",
    help: "lora extract: save modules of this name (or last name component) whole",
  },
  include: {
    type: "string",
    multiple: true,
    value: "REGEX",
    help: "lora extract: factor only modules whose name matches",
  },
  exclude: { type: "string", multiple: true, value: "REGEX", help: "lora extract: leave out modules that match" },
  "skip-undecomposable": {
    type: "boolean",
    help: "lora extract: leave out weights that are not linear layers (norms...) instead of saving them whole",
  },
  "no-distribute-scale": {
    type: "boolean",
    help: "lora extract: S into lora_A, lora_B = U (default: sqrt(S) in both)",
  },
  "strict-rank": { type: "boolean", help: "lora extract: refuse a rank larger than a module's matrix" },
  svd: { type: "string", value: "METHOD", help: "lora extract: auto (default), exact or randomized" },
  seed: { type: "string", value: "N", help: "lora extract: the randomized SVD's seed (default 0)" },
} as const satisfies OptionSpecs;

type Values = {
  [K in keyof typeof EXTRACT_OPTIONS]?: (typeof EXTRACT_OPTIONS)[K] extends { multiple: true }
    ? string[]
    : (typeof EXTRACT_OPTIONS)[K]["type"] extends "string"
      ? string
      : boolean;
} & { json?: boolean; fsync?: boolean; dtype?: string };

const DTYPES = { f32: "F32", f16: "F16", bf16: "BF16" } as const;

/** Run `lora extract BASE TUNED OUTDIR`. */
export function runExtract(io: Io, values: Values, positionals: readonly string[]): Promise<number> {
  if (positionals.length !== 3) throw new UsageError("lora extract takes BASE, TUNED and OUTDIR");
  const [base, tuned, outDir] = positionals as [string, string, string];
  if (values.rank === undefined) throw new UsageError("lora extract needs --rank R");
  const rank = Number(values.rank);
  if (!Number.isSafeInteger(rank) || rank < 1) throw new UsageError("--rank must be a positive integer");
  const svEpsilon = values["sv-epsilon"] === undefined ? 0 : Number(values["sv-epsilon"]);
  if (!Number.isFinite(svEpsilon) || svEpsilon < 0) throw new UsageError("--sv-epsilon must be a number >= 0");
  const svd = values.svd ?? "auto";
  if (svd !== "auto" && svd !== "exact" && svd !== "randomized") {
    throw new UsageError("--svd must be auto, exact or randomized");
  }
  const seed = values.seed === undefined ? 0 : Number(values.seed);
  if (!Number.isSafeInteger(seed)) throw new UsageError("--seed must be an integer");
  let dtype: "F32" | "F16" | "BF16" | undefined;
  if (values.dtype !== undefined) {
    dtype = DTYPES[values.dtype.toLowerCase() as keyof typeof DTYPES];
    if (dtype === undefined) throw new UsageError("--dtype must be f32, f16 or bf16");
  }
  return runWithProgress(io, values.json, (onProgress) =>
    extractLora(base, tuned, outDir, {
      rank,
      svEpsilon,
      embedLora: values["embed-lora"],
      modulesToSave: values["save-module"],
      include: values.include,
      exclude: values.exclude,
      skipUndecomposable: values["skip-undecomposable"],
      distributeScale: !values["no-distribute-scale"],
      strictRank: values["strict-rank"],
      svd,
      seed,
      dtype,
      fsync: values.fsync,
      onProgress: (p) => onProgress({ bytesWritten: p.bytesDone, bytesTotal: p.bytesTotal }),
    }),
  );
}
