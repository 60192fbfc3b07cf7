/**
 * Shard sizes as `huggingface_hub`'s `parse_size_to_int` reads them: the last two characters are the unit (TB, GB,
 * MB, KB in any case, decimal), the rest a Python float; the result is `int(value * multiplier)`, truncated toward
 * zero from the same double product. Extensions, each refused by huggingface_hub: binary units (KiB, MiB, GiB, TiB,
 * as transformers' older `convert_file_size_to_int` read them) and plain byte counts ("1000"). Negative sizes, which
 * huggingface_hub accepts and which put every tensor in its own shard, are refused.
 */
import { SafetensorError } from "../format/errors.js";

const DECIMAL: Record<string, number> = { TB: 1e12, GB: 1e9, MB: 1e6, KB: 1e3 };
const BINARY: Record<string, number> = { TIB: 2 ** 40, GIB: 2 ** 30, MIB: 2 ** 20, KIB: 2 ** 10 };

/** Python's `float()` grammar for finite decimals: digits may be grouped with single underscores. */
const PY_FLOAT = /^[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?$/;

function invalid(input: string, why: string): never {
  throw new SafetensorError("InvalidOption", `invalid shard size ${JSON.stringify(input)}: ${why}`);
}

function pythonFloat(text: string, input: string): number {
  const trimmed = text.trim();
  if (!PY_FLOAT.test(trimmed)) invalid(input, `${JSON.stringify(trimmed)} is not a number`);
  return Number(trimmed.replaceAll("_", ""));
}

function checked(bytes: number, input: string): number {
  if (!Number.isFinite(bytes)) invalid(input, "not finite");
  if (bytes < 0) invalid(input, "negative");
  // Sizes above 2^53 stay doubles, as in Python: they only ever compare against real (smaller) tensor sizes.
  return bytes;
}

/** Bytes in a shard size: a number of bytes, or a string such as "5GB", "150KB", "2GiB". */
export function parseSize(input: string | number): number {
  if (typeof input === "number") {
    if (!Number.isInteger(input)) invalid(String(input), "not an integer");
    return checked(input, String(input));
  }
  const text = input.trim();
  if (/^\d+$/.test(text)) return checked(Number(text), input);
  const upper = text.toUpperCase();
  const binary = BINARY[upper.slice(-3)];
  if (binary !== undefined) return checked(Math.trunc(pythonFloat(text.slice(0, -3), input) * binary), input);
  const decimal = DECIMAL[upper.slice(-2)];
  if (decimal === undefined) invalid(input, "the unit must be one of TB, GB, MB, KB, TiB, GiB, MiB, KiB");
  // int(float * multiplier) in Python truncates the same IEEE double product JS computes.
  return checked(Math.trunc(pythonFloat(text.slice(0, -2), input) * decimal), input);
}
