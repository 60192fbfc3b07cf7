/**
 * The `general.*` naming keys llama.cpp's converter writes (gguf-py's `Metadata` heuristics): a model name, base
 * name, size label, fine-tune and version read from the model's id (`_name_or_path` in config.json when it is a
 * hub id, else the directory's name), the size label from the parameter count otherwise, and the sampling defaults
 * of generation_config.json. The model card's YAML front matter is not read (see docs/gguf.md).
 */

export interface ModelNaming {
  name: string;
  organization?: string;
  basename?: string;
  finetune?: string;
  version?: string;
  sizeLabel?: string;
}

/** Python's str.islower(): at least one cased character, and none upper case. */
function isLower(s: string): boolean {
  return s !== s.toUpperCase() && s === s.toLowerCase();
}

function isCased(ch: string): boolean {
  return ch.toLowerCase() !== ch.toUpperCase();
}

/** Python's str.title(): a cased character after an uncased one is upper-cased, every other one lower-cased. */
function pyTitle(s: string): string {
  let out = "";
  let prevCased = false;
  for (const ch of s) {
    out += prevCased ? ch.toLowerCase() : ch.toUpperCase();
    prevCased = isCased(ch);
  }
  return out;
}

/** gguf-py's `id_to_title`. */
export function idToTitle(id: string): string {
  return id
    .trim()
    .replaceAll("-", " ")
    .split(/\s+/)
    .filter((w) => w.length > 0)
    .map((w) => (isLower(w) && !/^(v\d+(?:\.\d+)*|\d.*)$/.test(w) ? pyTitle(w) : w))
    .join(" ");
}

type Tag = "basename" | "size_label" | "finetune" | "version" | "type";

const isDecimal = (ch: string | undefined) => ch !== undefined && ch >= "0" && ch <= "9";

/** gguf-py's `get_model_id_components`: [full name, organization, basename, finetune, version, size label]. */
export function modelIdComponents(
  modelId: string,
  totalParams: number,
): [string, string | undefined, string | undefined, string | undefined, string | undefined, string | undefined] {
  if (modelId.includes(" ")) return [modelId, undefined, undefined, undefined, undefined, undefined];
  let org: string | undefined;
  let full = modelId;
  const slash = modelId.indexOf("/");
  if (slash >= 0) {
    org = modelId.slice(0, slash);
    full = modelId.slice(slash + 1);
  }
  if (org !== undefined && org.length > 0 && org[0] === ".") org = undefined;
  const parts = full.split("-").filter((p) => p.length > 0);
  const tags: Set<Tag>[] = parts.map(() => new Set());
  parts.forEach((part, i) => {
    if (/^(v|iter)?\d+([.]\d+)*$/i.test(part)) tags[i]!.add("version");
    else if (/^(i?q\d(_\w)*|b?fp?(16|32))$/i.test(part)) {
      tags[i]!.add("type");
      parts[i] = part.toUpperCase();
    } else if (i > 0 && /^(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)$/i.test(part)) {
      let p = part.replaceAll("_", ".");
      if (isDecimal(p[p.length - 1])) p = `${p.slice(0, -2)}.${p[p.length - 1]}${p[p.length - 2]}`;
      if (p.length > 1 && isDecimal(p[p.length - 2]) && "kmbt".includes(p[p.length - 1]!)) {
        p = p.slice(0, -1) + p[p.length - 1]!.toUpperCase();
      }
      if (totalParams !== 0) {
        const value = Number(p.slice(0, -1));
        const scale = " KMBT".indexOf(p[p.length - 1]!);
        if (!Number.isNaN(value) && p.slice(0, -1).trim() !== "") {
          const label = value * 1000 ** scale;
          if (
            (totalParams < 0 && label < Math.floor(Math.abs(totalParams) / 8)) ||
            (totalParams > 0 && Math.abs(label - totalParams) > Math.floor((7 * totalParams) / 8))
          ) {
            tags[i]!.add("finetune");
            p = p.slice(0, -1) + p[p.length - 1]!.toLowerCase();
          }
        }
      }
      if (tags[i]!.size === 0) tags[i]!.add("size_label");
      parts[i] = p;
    } else if (i > 0 && /^(chat|instruct|vision|lora)$/i.test(part)) {
      if (totalParams < 0 && part.toLowerCase() === "lora") tags[i]!.add("type");
      else tags[i]!.add("finetune");
    }
  });
  const hasNumericSize = parts.some((p, i) => tags[i]!.has("size_label") && [...p].some(isDecimal));
  if (hasNumericSize) {
    parts.forEach((p, i) => {
      if (tags[i]!.has("size_label") && [...p].every((ch) => isCased(ch))) tags[i]!.delete("size_label");
    });
  }
  let atStart = true;
  parts.forEach((p, i) => {
    const t = tags[i]!;
    if (atStart && ((t.size === 0 && isCased(p[0]!)) || t.has("version"))) t.add("basename");
    else {
      if (atStart) atStart = false;
      if (t.size === 0) t.add("finetune");
    }
  });
  for (let i = parts.length - 1; i >= 0; i--) {
    const t = tags[i]!;
    if (t.has("basename") && t.size > 1) t.delete("basename");
    else break;
  }
  const join = (tag: Tag, exclude?: Tag) =>
    parts.filter((_, i) => tags[i]!.has(tag) && (exclude === undefined || !tags[i]!.has(exclude))).join("-") ||
    undefined;
  let basename = join("basename");
  const sizeLabel = [...new Set(parts.filter((_, i) => tags[i]!.has("size_label")))].join("-") || undefined;
  const finetune = join("finetune");
  const version = join("version", "basename");
  if (sizeLabel === undefined && finetune === undefined && version === undefined) basename = undefined;
  return [full, org, basename, finetune, version, sizeLabel];
}

/** gguf-py's `model_weight_count_rounded_notation` with two significant digits at least. */
export function sizeLabel(totalParams: number): string {
  let scaled: number;
  let suffix: string;
  if (totalParams > 1e12) {
    scaled = totalParams * 1e-12;
    suffix = "T";
  } else if (totalParams > 1e9) {
    scaled = totalParams * 1e-9;
    suffix = "B";
  } else if (totalParams > 1e6) {
    scaled = totalParams * 1e-6;
    suffix = "M";
  } else {
    scaled = totalParams * 1e-3;
    suffix = "K";
  }
  const digits = String(pyRound(scaled)).replace(/^0+/, "").length;
  const fix = Math.max(2 - digits, 0);
  return `${scaled.toFixed(fix)}${suffix}`;
}

/** Python's round(): half to even. */
function pyRound(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The naming keys, from config.json's `_name_or_path` (a hub id) and then the directory's name. */
export function modelNaming(
  config: Record<string, unknown>,
  directoryName: string,
  totalParams: number,
  nameOverride?: string,
): ModelNaming {
  const naming: Partial<ModelNaming> = {};
  if (nameOverride !== undefined) naming.name = nameOverride;
  const apply = (id: string) => {
    const [full, org, basename, finetune, version, size] = modelIdComponents(id, totalParams);
    naming.name ??= idToTitle(full);
    if (org !== undefined) naming.organization ??= idToTitle(org);
    if (basename !== undefined) naming.basename ??= basename;
    if (finetune !== undefined) naming.finetune ??= finetune;
    if (version !== undefined) naming.version ??= version;
    if (size !== undefined) naming.sizeLabel ??= size;
  };
  const nameOrPath = config._name_or_path;
  if (typeof nameOrPath === "string" && nameOrPath.split("/").length - 1 <= 1) apply(nameOrPath);
  if (directoryName !== "") apply(directoryName);
  naming.name ??= directoryName;
  if (naming.sizeLabel === undefined && totalParams > 0) naming.sizeLabel = sizeLabel(totalParams);
  return naming as ModelNaming;
}
