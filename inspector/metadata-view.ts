/**
 * `__metadata__` as a table: string values that hold JSON (kohya `ss_tag_frequency`, `ss_dataset_dirs`, ModelSpec
 * objects) pretty-printed in a collapsible block, and the training facts people look for first pulled to the top.
 */

export interface MetadataRow {
  key: string;
  /** The value as stored. */
  text: string;
  /** The parsed JSON when the value is a JSON object or array. */
  json: unknown;
}

export interface Fact {
  label: string;
  value: string;
}

export function metadataRows(metadata: Record<string, unknown>): MetadataRow[] {
  return Object.entries(metadata).map(([key, value]) => {
    if (typeof value !== "string") return { key, text: JSON.stringify(value), json: value };
    let json: unknown;
    if (/^\s*[[{]/.test(value)) {
      try {
        json = JSON.parse(value);
      } catch {
        json = undefined;
      }
    }
    return { key, text: value, json };
  });
}

const FACTS: [string, string[]][] = [
  ["title", ["modelspec.title", "ss_output_name"]],
  ["architecture", ["modelspec.architecture", "ss_base_model_version"]],
  ["base model", ["ss_sd_model_name", "modelspec.base_model", "base_model"]],
  ["network", ["ss_network_module"]],
  ["network dim", ["ss_network_dim"]],
  ["network alpha", ["ss_network_alpha"]],
  ["trigger words", ["modelspec.trigger_phrase", "ss_trigger_words"]],
  ["resolution", ["modelspec.resolution", "ss_resolution"]],
  ["epochs", ["ss_num_epochs"]],
  ["steps", ["ss_max_train_steps", "ss_steps"]],
  ["learning rate", ["ss_learning_rate"]],
  ["format", ["format"]],
];

/** The most frequent tags of kohya's `ss_tag_frequency` ({dataset: {tag: count}}), the usual trigger words. */
function topTags(value: string | undefined, n = 8): string | undefined {
  if (!value) return undefined;
  try {
    const sets = JSON.parse(value) as Record<string, Record<string, number>>;
    const totals = new Map<string, number>();
    for (const tags of Object.values(sets)) {
      for (const [tag, count] of Object.entries(tags ?? {})) totals.set(tag, (totals.get(tag) ?? 0) + Number(count));
    }
    const top = [...totals].sort((a, b) => b[1] - a[1]).slice(0, n);
    return top.length ? top.map(([tag, count]) => `${tag.trim()} (${count})`).join(", ") : undefined;
  } catch {
    return undefined;
  }
}

export function trainingFacts(metadata: Record<string, unknown>): Fact[] {
  const get = (key: string) => (typeof metadata[key] === "string" ? (metadata[key] as string) : undefined);
  const facts: Fact[] = [];
  for (const [label, keys] of FACTS) {
    const value = keys.map(get).find((v) => v !== undefined && v !== "" && v !== "None");
    if (value !== undefined) facts.push({ label, value });
  }
  const tags = topTags(get("ss_tag_frequency"));
  if (tags) facts.push({ label: "top tags", value: tags });
  return facts;
}
