/** `safetensors edit`: overwrite a slice of one tensor in place, journaled, with a proof of what changed. */
import * as fs from "node:fs";
import { negativeNanLikeNumpy } from "../codecs/numpy.js";
import { isNpy, npyFits, parseNpy } from "../edit/npy.js";
import { openForEdit } from "../edit/open.js";
import type { EditValues, LocalityProof, VerifyLevel } from "../edit/region.js";
import { SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { ioError } from "../io/node-file.js";
import { parseSliceSpec, planSlice } from "../slice/index.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";

/** The values of `--from PATH`: a .npy array (checked against the slice) or raw bytes of the slice's length. */
function valuesFrom(file: string, info: TensorInfo, spec: string): EditValues {
  let bytes: Uint8Array;
  try {
    bytes = new Uint8Array(fs.readFileSync(file));
  } catch (error) {
    throw ioError(error, `cannot read ${file}`);
  }
  if (!isNpy(bytes)) return bytes; // raw: the edit checks the length
  const array = parseNpy(bytes);
  const plan = planSlice(info.dtype, info.exactShape ?? info.shape, parseSliceSpec(spec));
  try {
    const fits = npyFits(array, info.dtype, plan.shape);
    if (fits === "raw") return array.data;
    if (fits === "f64") return new Float64Array(array.data.slice().buffer);
    return new Float32Array(array.data.slice().buffer);
  } catch (error) {
    if (error instanceof SafetensorError) {
      throw new SafetensorError(error.code, `${file}: ${error.message}`, { tensor: info.name });
    }
    throw error;
  }
}

const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/**
 * A `--fill` value as Python's `float()` / `int()` read it, which is what numpy is given: decimal numbers, `inf`,
 * `infinity` and `nan` in any case with a sign; integers beyond 2^53 exactly (a bigint, for I64 / U64).
 */
function parseFill(text: string): number | bigint {
  const value = text.trim();
  if (/^[+-]?\d+$/.test(value)) {
    const big = BigInt(value);
    return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
  }
  if (DECIMAL.test(value)) return Number(value);
  const special = /^([+-]?)(inf|infinity|nan)$/i.exec(value);
  if (special) {
    if (special[2]!.toLowerCase() === "nan") return Number.NaN; // -nan: see fillInput

    return special[1] === "-" ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  }
  throw new UsageError(`--fill takes a number (decimal, inf or nan), got ${JSON.stringify(text)}`);
}

/**
 * What `--fill` writes: `{fill}`, or for `-nan` the slice's bytes of Python's `float("-nan")`, sign bit set, as numpy
 * writes it (0xFE00 in F16; a number cannot carry a NaN's sign through V8).
 */
function fillInput(text: string, fill: number | bigint, info: TensorInfo, spec: string): EditValues {
  if (/^\s*-nan\s*$/i.test(text)) {
    const plan = planSlice(info.dtype, info.exactShape ?? info.shape, parseSliceSpec(spec));
    const bytes = negativeNanLikeNumpy(info.dtype, plan.elementCount);
    if (bytes) return bytes;
  }
  return { fill };
}

function describeProof(proof: LocalityProof | undefined): string[] {
  if (!proof) return ["not verified (--verify none): only the edited ranges were written"];
  const lines = [
    `tensor sha256 before ${proof.tensorSha256Before}`,
    `tensor sha256 after  ${proof.tensorSha256After}`,
    "verified: the tensor after the edit is the tensor before with only the slice's bytes replaced",
  ];
  if (proof.level === "full") {
    lines.push(
      `file sha256 before ${proof.fileSha256Before}`,
      `file sha256 after  ${proof.fileSha256After}`,
      "verified: every byte of the file outside the slice (header and every other tensor) is unchanged",
    );
  } else {
    lines.push("not read back: the rest of the file (never written by the edit; --verify full checks it)");
  }
  return lines;
}

export const command = defineCommand({
  usage:
    "edit FILE|DIR NAME --slice SPEC (--fill VALUE | --from RAW|NPY) [--verify tensor|full|none] [--no-fsync] [--json]",
  description: `Overwrite NAME[SPEC] in place (numpy basic indexing, as in get --slice; a slice reaching outside the
tensor is refused, never clamped). FILE may be a sharded checkpoint (directory or index): the shard holding NAME is
edited. Only the slice's bytes are written; their old bytes go first to an undo journal next to the file
(.FILE-journal), fsynced (unless --no-fsync) before the data and removed once the edit is complete. An edit cut short
by a crash is rolled back by the next edit or by "safetensors recover FILE"; readers warn meanwhile.

--fill VALUE writes one value everywhere (any dtype; integers exact and in range, BOOL 0 or 1; floats rounded to
nearest even as numpy rounds a Python float; inf, -inf and nan too). --from PATH takes a .npy array whose shape is
the slice's shape and whose type is the tensor's own (<f2 for F16, <V2 for ml_dtypes' bfloat16, ...) or float32 /
float64 for any float tensor (rounded to nearest even as numpy casts them), or raw little-endian bytes of exactly
the slice's length.

--verify (default tensor): SHA-256 of the tensor before and after, and a check that the tensor after is the tensor
before with only the slice replaced. full: the same over the whole file (reads it three times). none: no check.
--json prints {"file","tensor","slice","elements","bytes","ranges":[[start,end]...],"fsync","verify",
"tensor_sha256_before","tensor_sha256_after"[,"file_sha256_before","file_sha256_after"],
"rest_of_file_checked"}.`,
  options: {
    slice: { type: "string", value: "SPEC", help: "the slice to overwrite (numpy basic indexing); required" },
    fill: { type: "string", value: "VALUE", help: "write this value everywhere in the slice" },
    from: { type: "string", value: "PATH", help: "values from a .npy array or raw bytes" },
    verify: { type: "string", value: "tensor|full|none", help: "what to check after the write (default tensor)" },
    "no-fsync": {
      type: "boolean",
      help: "do not fsync the journal and the file (a power loss may then tear the edit)",
    },
    json: { type: "boolean", help: "print the result as JSON" },
  },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("edit takes FILE (or DIR) and NAME");
    const [target, name] = positionals as [string, string];
    if (values.slice === undefined) throw new UsageError('edit needs --slice SPEC (":" or "..." for the whole tensor)');
    if ((values.fill === undefined) === (values.from === undefined)) {
      throw new UsageError("edit takes one of --fill VALUE and --from PATH");
    }
    const verify = (values.verify ?? "tensor") as VerifyLevel;
    if (!["tensor", "full", "none"].includes(verify)) throw new UsageError("--verify must be tensor, full or none");
    const fill = values.fill === undefined ? undefined : parseFill(values.fill);
    const fsync = !values["no-fsync"];
    using editor = openForEdit(target, { fsync });
    const info = editor.info(name);
    const input =
      fill !== undefined
        ? fillInput(values.fill!, fill, info, values.slice)
        : valuesFrom(values.from!, info, values.slice);
    const result = editor.write(name, values.slice, input, { verify });
    editor.commit();
    const proof = result.proof;
    if (values.json) {
      const fields: string[] = [
        `"file":${JSON.stringify(result.file)}`,
        `"tensor":${JSON.stringify(name)}`,
        `"slice":${JSON.stringify(values.slice)}`,
        `"elements":${result.elements}`,
        `"bytes":${result.bytes}`,
        `"ranges":${JSON.stringify(result.ranges.map((r) => [r.start, r.end]))}`,
        `"fsync":${fsync}`,
        `"verify":"${verify}"`,
      ];
      if (proof) {
        fields.push(
          `"tensor_sha256_before":"${proof.tensorSha256Before}"`,
          `"tensor_sha256_after":"${proof.tensorSha256After}"`,
        );
        if (proof.level === "full") {
          fields.push(
            `"file_sha256_before":"${proof.fileSha256Before}"`,
            `"file_sha256_after":"${proof.fileSha256After}"`,
          );
        }
      }
      fields.push(`"rest_of_file_checked":${proof?.level === "full"}`);
      io.stdout(`{${fields.join(",")}}\n`);
      return 0;
    }
    const ranges = result.ranges.length;
    io.stdout(
      `edited ${name}[${values.slice}] in ${result.file}: ${result.elements} elements, ${result.bytes} bytes ` +
        `(${ranges} range${ranges === 1 ? "" : "s"} written)${fsync ? "" : ", not fsynced"}\n`,
    );
    for (const line of describeProof(proof)) io.stdout(`${line}\n`);
    return 0;
  },
});
