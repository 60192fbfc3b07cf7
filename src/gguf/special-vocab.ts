/**
 * Special token ids, add-BOS/EOS/SEP flags, BPE merges and the chat template, read from tokenizer.json,
 * tokenizer_config.json, chat_template.jinja / chat_template.json and config.json in the order and with the
 * precedence of gguf-py's `SpecialVocab` (which llama.cpp's converter uses), including its reading of a
 * `TemplateProcessing` post-processor for the add-token flags.
 */
/** A parsed JSON object (a model's `config.json`, `tokenizer_config.json`...). */
export type Json = Record<string, unknown>;

export const SPECIAL_TOKEN_TYPES = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"] as const;

export interface ModelTextFiles {
  tokenizerJson?: Json | undefined;
  tokenizerConfig?: Json | undefined;
  config?: Json | undefined;
  chatTemplateJinja?: string | undefined;
  chatTemplateJson?: Json | undefined;
  /** Other templates in additional_chat_templates/*.jinja, by name. */
  additionalTemplates?: ReadonlyMap<string, string> | undefined;
}

export interface SpecialVocab {
  /** In insertion order, as gguf-py writes them. */
  readonly ids: Map<string, number>;
  readonly add: Map<string, boolean>;
  readonly chatTemplate: string | { name: string; template: string }[] | undefined;
  readonly merges: readonly string[];
  readonly normalizerLowercase: boolean | undefined;
  readonly normalizerStripAccents: boolean | undefined;
}

export interface SpecialVocabOptions {
  loadMerges?: boolean;
  /** Ids at or above this are skipped (SentencePiece vocabularies). */
  nVocab?: number;
  merges?: readonly string[];
  types?: readonly string[];
}

function content(entry: unknown): string | undefined {
  if (typeof entry === "string") return entry;
  if (entry !== null && typeof entry === "object") {
    const c = (entry as Json).content;
    return typeof c === "string" ? c : undefined;
  }
  return undefined;
}

const truthy = (v: unknown) => v !== undefined && v !== null && v !== "" && v !== false && v !== 0;

export function readSpecialVocab(files: ModelTextFiles, options: SpecialVocabOptions = {}): SpecialVocab {
  const ids = new Map<string, number>();
  const add = new Map<string, boolean>();
  let types: string[] = [...(options.types ?? SPECIAL_TOKEN_TYPES)];
  let chatTemplate: SpecialVocab["chatTemplate"];
  let merges: readonly string[] = [];
  let lower: boolean | undefined;
  let strip: boolean | undefined;

  const setId = (typ: string, tid: unknown) => {
    if (typeof tid !== "number" || !Number.isInteger(tid) || typeof tid === "boolean") return;
    if (tid < 0) throw new Error(`invalid value for special token type ${typ}: ${tid}`);
    if (options.nVocab === undefined || tid < options.nVocab) {
      if (!ids.has(typ)) ids.set(typ, tid);
    }
  };

  const tokenizer = files.tokenizerJson;
  let addedTokens: Json[] = [];
  if (tokenizer !== undefined) {
    if (options.loadMerges) merges = options.merges ?? [];
    const parseNormalizer = (n: Json) => {
      if (n.type === "Lowercase") lower = true;
      else if (n.type === "StripAccents") strip = true;
      else if (n.type === "BertNormalizer") {
        if ("lowercase" in n) lower = n.lowercase as boolean;
        if ("strip_accents" in n) strip = n.strip_accents as boolean;
      } else if (n.type === "Sequence") for (const inner of (n.normalizers as Json[]) ?? []) parseNormalizer(inner);
    };
    const normalizer = tokenizer.normalizer as Json | null | undefined;
    if (normalizer) parseNormalizer(normalizer);
    addedTokens = (tokenizer.added_tokens as Json[]) ?? [];
  }
  // gguf-py edits its copy of tokenizer_config.json as it reads the post-processor.
  const config: Json | undefined = files.tokenizerConfig === undefined ? undefined : { ...files.tokenizerConfig };
  const hasConfig = config !== undefined && Object.keys(config).length > 0;
  if (tokenizer !== undefined) {
    let bos = config?.bos_token as unknown;
    let cls = config?.cls_token as unknown;
    let eos = config?.eos_token as unknown;
    let sep = config?.sep_token as unknown;
    if (!truthy(bos) && truthy(cls) && hasConfig) config!.bos_token = bos = cls;
    if (!truthy(eos) && truthy(sep) && hasConfig) config!.eos_token = eos = sep;
    const post = tokenizer.post_processor as Json | null | undefined;
    if (post) {
      const processors = (post.processors as Json[] | undefined) ?? [post];
      for (const processor of processors) {
        if (processor.type === "RobertaProcessing") {
          add.set("bos", true);
          add.set("eos", true);
          add.set("sep", true);
          if (!truthy(cls) && hasConfig) config!.cls_token = cls = ((processor.cls as unknown[]) ?? [bos])[0];
          if (!truthy(sep) && hasConfig) config!.sep_token = sep = ((processor.sep as unknown[]) ?? [eos])[0];
          continue;
        }
        if (processor.type !== "TemplateProcessing") continue;
        const single = (processor.single as Json[]) ?? [];
        let pair = (processor.pair as Json[]) ?? [];
        const specialId = (item: Json | undefined) => (item?.SpecialToken as Json | undefined)?.id as unknown;
        let first: unknown;
        let last: unknown;
        if (single.length > 1) {
          first = specialId(single[0]);
          if (truthy(first)) {
            if (!hasConfig) bos = first;
            else if (first !== bos && first !== cls) {
              if (!truthy(bos)) config!.bos_token = bos = first;
              if (!truthy(cls)) config!.cls_token = cls = first;
            }
            add.set("bos", first === bos || first === cls);
          }
          last = specialId(single[single.length - 1]);
          if (truthy(last)) {
            if (!hasConfig) eos = last;
            else if (last !== eos) {
              if (!types.includes("eot")) {
                types = [...types, "eot"];
                config!.eot_token = eos;
              } else if (!types.includes("eom")) {
                types = [...types, "eom"];
                config!.eom_token = eos;
              }
              config!.eos_token = eos = last;
            }
            add.set("eos", last === eos);
          }
        }
        if (pair.length > 0) {
          const start = truthy(first) && specialId(pair[0]) === first ? 1 : 0;
          const stop = truthy(last) && specialId(pair[pair.length - 1]) === last ? pair.length - 1 : pair.length;
          pair = pair.slice(start, stop);
          if (pair.length > 0) {
            const a = (pair[0]!.Sequence as Json | undefined)?.id;
            const b = (pair[pair.length - 1]!.Sequence as Json | undefined)?.id;
            if (a === "A" && b === "B") {
              const middle = pair.slice(1, -1);
              if (middle.length > 0) {
                let addSep = false;
                const entry = specialId(middle[0]);
                if (truthy(entry) && (entry === sep || entry === eos) && !truthy(last)) addSep = true;
                if (middle.length === 2) {
                  const second = specialId(middle[1]);
                  if (truthy(second) && (second === sep || second === eos)) addSep = true;
                }
                add.set("sep", addSep);
                if (addSep && !truthy(sep) && hasConfig) config!.sep_token = eos;
              }
            }
          }
        }
      }
    }
  }
  if (hasConfig) {
    let alt: SpecialVocab["chatTemplate"];
    if (files.chatTemplateJinja !== undefined) {
      alt = files.chatTemplateJinja;
      if (files.additionalTemplates !== undefined && files.additionalTemplates.size > 0) {
        alt = [{ name: "default", template: files.chatTemplateJinja }];
        for (const [name, template] of files.additionalTemplates) alt.push({ name, template });
      }
    } else if (files.chatTemplateJson !== undefined) {
      alt = files.chatTemplateJson.chat_template as SpecialVocab["chatTemplate"];
    }
    const template = "chat_template" in config! ? config!.chat_template : alt;
    if (template === null || template === undefined) chatTemplate = undefined;
    else if (typeof template === "string" || Array.isArray(template)) {
      chatTemplate = template as SpecialVocab["chatTemplate"];
    }
    for (const typ of types) {
      const addEntry = config![`add_${typ}_token`];
      if (typeof addEntry === "boolean") add.set(typ, addEntry);
      const c = content(config![`${typ}_token`]);
      if (c === undefined) continue;
      const found = addedTokens.find((t) => t.content === c);
      setId(typ, found?.id);
    }
  }
  const modelConfig = files.config;
  if (modelConfig !== undefined) {
    for (const typ of types) {
      let tid = modelConfig[`${typ}_token_id`];
      if ((tid === undefined || tid === null) && modelConfig.text_config !== undefined) {
        tid = (modelConfig.text_config as Json)[`${typ}_token_id`];
      }
      setId(typ, tid);
    }
  }
  return { ids, add, chatTemplate, merges, normalizerLowercase: lower, normalizerStripAccents: strip };
}

/** gguf-py's key names for special token ids (types without one are skipped, as gguf-py skips them). */
export const SPECIAL_ID_KEYS: Readonly<Record<string, string>> = {
  bos: "tokenizer.ggml.bos_token_id",
  eos: "tokenizer.ggml.eos_token_id",
  unk: "tokenizer.ggml.unknown_token_id",
  sep: "tokenizer.ggml.seperator_token_id",
  pad: "tokenizer.ggml.padding_token_id",
  mask: "tokenizer.ggml.mask_token_id",
  eot: "tokenizer.ggml.eot_token_id",
  eom: "tokenizer.ggml.eom_token_id",
};

export const ADD_TOKEN_KEYS: Readonly<Record<string, string>> = {
  bos: "tokenizer.ggml.add_bos_token",
  eos: "tokenizer.ggml.add_eos_token",
  sep: "tokenizer.ggml.add_sep_token",
};
