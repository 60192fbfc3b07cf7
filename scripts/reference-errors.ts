/**
 * The reference's error messages (Python `safetensors` 0.8.0) sorted into classes, and the code our reader gives for
 * each class. Shared by the differential fuzzer, the hostile-header tests and their benchmark.
 */

/** Reference error text → a class with the specifics (names, numbers, positions) taken out. */
export function refClass(error: string | null): string {
  if (error === null) return "ok";
  let e = error.replace(/^Error while deserializing( header)?: /, "");
  e = e.replace(/ at line \d+ column \d+$/, "");
  if (e.startsWith("invalid JSON in header: ")) {
    let m = e.slice("invalid JSON in header: ".length);
    if (m.startsWith("duplicate field")) return `json: ${m}`;
    m = m.replace(/, expected .*$/s, "");
    m = m.replace(/`[^`]*`/g, "`_`").replace(/\d+/g, "N");
    if (m.startsWith("invalid type")) m = m.replace(/ `_`$/, "");
    return `json: ${m}`;
  }
  if (e.startsWith("invalid UTF-8")) return "invalid UTF-8";
  if (e.startsWith("invalid offset")) return "invalid offset";
  if (e.startsWith("The slice is slicing for subbytes")) return "misaligned slice";
  return e.replace(/`[^`]*`/g, "`_`");
}

/** The code we should give for each class of reference error. */
export function expectedCodes(cls: string): string[] | null {
  if (cls === "header too small") return ["HeaderTooSmall"];
  if (cls === "header too large") return ["HeaderTooLarge"];
  if (cls === "invalid header length") return ["InvalidHeaderLength"];
  if (cls === "invalid UTF-8") return ["InvalidHeaderUtf8"];
  if (cls.startsWith("json: duplicate field")) return ["DuplicateKey"];
  if (cls.startsWith("json: unknown variant")) return ["UnknownDtype"];
  if (/^json: (invalid type|invalid length|invalid value|missing field)/.test(cls)) return ["InvalidHeaderStructure"];
  if (cls.startsWith("json: ")) return ["InvalidHeaderJson"];
  if (cls === "invalid offset") return ["InvalidOffset"];
  if (cls.startsWith("overflow")) return ["ValidationOverflow"];
  if (cls === "misaligned slice") return ["MisalignedSlice"];
  if (cls.startsWith("invalid shape, data type, or offset")) return ["TensorInvalidInfo"];
  if (cls.startsWith("incomplete metadata")) return ["MetadataIncompleteBuffer"];
  return null;
}
