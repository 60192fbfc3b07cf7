/**
 * `__metadata__` for people: one row per key with JSON-in-string values parsed (kohya's `ss_tag_frequency`,
 * `ss_dataset_dirs`, `ss_bucket_info`, `ss_network_args`; any value that is a JSON object or array), and the facts
 * people look for first surfaced from kohya (`ss_*`) and ModelSpec (`modelspec.*`) keys: network module, dim and
 * alpha, base model, trigger words and top tags, resolution, epochs, steps, ModelSpec title and architecture.
 *
 * Pure code: no `node:` imports, runs in browsers.
 */

export type MetadataGroup = "kohya" | "modelspec" | "other";

export interface MetadataRow {
  readonly key: string;
  /** The stored string. */
  readonly value: string;
  /** The value parsed, when it is a JSON object or array; otherwise undefined. */
  readonly json?: unknown;
  readonly group: MetadataGroup;
}

export interface Fact {
  /** Stable identifier: `network_module`, `network_dim`, `network_alpha`, `base_model`, `trigger_words`, ... */
  readonly id: string;
  readonly label: string;
  readonly value: string;
  /** The metadata keys it comes from. */
  readonly keys: readonly string[];
}

export interface TagCount {
  readonly tag: string;
  readonly count: number;
}

export interface MetadataView {
  readonly rows: MetadataRow[];
  readonly facts: Fact[];
  /** kohya `ss_tag_frequency` summed over its datasets, most frequent first (at most `maxTags`). */
  readonly topTags: TagCount[];
}

export const DEFAULT_MAX_TAGS = 20;

function groupOf(key: string): MetadataGroup {
  if (key.startsWith("ss_") || key.startsWith("sshs_")) return "kohya";
  return key.startsWith("modelspec.") ? "modelspec" : "other";
}

/** A JSON object or array inside a string, or undefined (plain strings, numbers and invalid JSON stay text). */
export function parseJsonValue(value: string): unknown {
  const text = value.trim();
  if (!(text.startsWith("{") && text.endsWith("}")) && !(text.startsWith("[") && text.endsWith("]"))) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** kohya's tag counts per dataset folder, summed by tag (own keys only, so `__proto__` is an ordinary tag). */
function tagCounts(json: unknown): Map<string, number> {
  const totals = new Map<string, number>();
  if (!isRecord(json)) return totals;
  for (const dataset of Object.values(json)) {
    if (!isRecord(dataset)) continue;
    for (const [tag, count] of Object.entries(dataset)) {
      if (typeof count === "number" && Number.isFinite(count)) totals.set(tag, (totals.get(tag) ?? 0) + count);
    }
  }
  return totals;
}

const present = (value: string | undefined): value is string =>
  value !== undefined && value.trim() !== "" && value !== "None" && value !== "null";

function fmtDate(seconds: string): string | undefined {
  const n = Number(seconds);
  return Number.isFinite(n) && n > 0 ? new Date(n * 1000).toISOString().replace(/\.\d+Z$/, "Z") : undefined;
}

export function describeMetadata(
  metadata: ReadonlyMap<string, string> | null,
  options: { maxTags?: number } = {},
): MetadataView {
  const rows: MetadataRow[] = [];
  const parsed = new Map<string, unknown>();
  for (const [key, value] of metadata ?? []) {
    const json = parseJsonValue(value);
    if (json !== undefined) parsed.set(key, json);
    rows.push(json === undefined ? { key, value, group: groupOf(key) } : { key, value, json, group: groupOf(key) });
  }
  const get = (key: string) => metadata?.get(key);
  const facts: Fact[] = [];
  const fact = (id: string, label: string, keys: readonly string[], value?: string) => {
    const found = keys.find((k) => present(get(k)));
    const shown = value ?? (found === undefined ? undefined : get(found));
    if (present(shown)) facts.push({ id, label, value: shown, keys: found === undefined ? keys : [found] });
  };
  fact("title", "Title", ["modelspec.title", "ss_output_name"]);
  fact("architecture", "Architecture", ["modelspec.architecture"]);
  fact("implementation", "Implementation", ["modelspec.implementation"]);
  fact("network_module", "Network module", ["ss_network_module"]);
  const args = parsed.get("ss_network_args");
  if (isRecord(args) && typeof args.algo === "string")
    fact("network_algo", "Algorithm", ["ss_network_args"], args.algo);
  fact("network_dim", "Network dim (rank)", ["ss_network_dim"]);
  fact("network_alpha", "Network alpha", ["ss_network_alpha"]);
  if (isRecord(args)) {
    if (args.conv_dim !== undefined || args.conv_rank !== undefined) {
      fact("conv_dim", "Conv dim", ["ss_network_args"], String(args.conv_dim ?? args.conv_rank));
    }
    if (args.conv_alpha !== undefined) fact("conv_alpha", "Conv alpha", ["ss_network_args"], String(args.conv_alpha));
  }
  fact("base_model", "Base model", ["ss_sd_model_name", "ss_base_model_version", "modelspec.base_model"]);
  fact("base_model_version", "Base model version", ["ss_base_model_version"]);
  fact("v2", "SD 2.x", ["ss_v2"]);
  fact("trigger_words", "Trigger words", ["modelspec.trigger_phrase", "ss_training_comment"]);
  const maxTags = options.maxTags ?? DEFAULT_MAX_TAGS;
  const tags = parsed.has("ss_tag_frequency") ? tagCounts(parsed.get("ss_tag_frequency")) : new Map<string, number>();
  const topTags = [...tags]
    .map(([tag, count]) => ({ tag, count }))
    .sort((a, b) => b.count - a.count || (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0))
    .slice(0, maxTags);
  if (topTags.length > 0) {
    fact(
      "top_tags",
      "Top tags",
      ["ss_tag_frequency"],
      topTags
        .slice(0, 5)
        .map((t) => `${t.tag} (${t.count})`)
        .join(", "),
    );
  }
  fact("resolution", "Resolution", ["modelspec.resolution", "ss_resolution"]);
  fact("epochs", "Epochs", ["ss_num_epochs", "ss_epoch"]);
  if (present(get("ss_epoch")) && present(get("ss_num_epochs")) && get("ss_epoch") !== get("ss_num_epochs")) {
    fact("epoch", "Saved at epoch", ["ss_epoch"]);
  }
  fact("steps", "Steps", ["ss_max_train_steps", "ss_steps"]);
  fact("train_images", "Training images", ["ss_num_train_images"]);
  fact("learning_rate", "Learning rate", ["ss_learning_rate", "ss_unet_lr"]);
  fact("optimizer", "Optimizer", ["ss_optimizer"]);
  const started = get("ss_training_started_at");
  if (present(started)) fact("trained_at", "Training started", ["ss_training_started_at"], fmtDate(started));
  fact("date", "Date", ["modelspec.date"]);
  fact("author", "Author", ["modelspec.author"]);
  fact("license", "License", ["modelspec.license"]);
  fact("description", "Description", ["modelspec.description"]);
  return { rows, facts, topTags };
}
