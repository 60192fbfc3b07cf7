/*
 * scanHeader(bytes: Uint8Array, out: Float64Array) -> count of numbers written to `out`, -1, or -2
 *
 * A one-pass scanner for the common shape of a safetensors header, so that opening a file creates no JavaScript
 * object per tensor before it is needed: measured on a 48-tensor header, the first JSON.parse in a process took
 * 70–115 µs (V8 builds a hidden class per new key), more than the reference's whole cold safe_open (~0.14 ms).
 * It writes numbers only (positions and values) into a buffer the caller reuses, so a call allocates nothing.
 *
 * It accepts only a strict subset of JSON and answers -1 for everything else, so that the full reader in
 * src/format decides every case it does not recognise (invalid headers included); -2 means `out` is too small.
 * The subset: one object whose members are
 *   "__metadata__": null | { "key": "value", ... }
 *   "name": { "dtype": "X", "shape": [u, ...], "data_offsets": [u, u] }   (each field once, any order)
 * strings without escapes, control characters or bytes >= 0x80 (so the header is ASCII and needs no UTF-8 check),
 * integers without sign, fraction, exponent or leading zeros and below 10^15 (exact in a double), JSON whitespace
 * between tokens and after the object. Dtype names, repeated names and the tensors' layout are checked by the
 * caller (src/format/scanned.ts).
 *
 * Records, in document order (positions are byte offsets into `bytes`, [start, end)):
 *   0, nameStart, nameEnd, dtypeStart, dtypeEnd, ndim, dim..., begin, end     a tensor
 *   1, keyStart, keyEnd, valueStart, valueEnd                                 one metadata entry
 *   2                                                                         "__metadata__" is an object
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <node_api.h>

#include "header_scan.h"

typedef struct {
  const uint8_t *p;
  const uint8_t *end;
} cursor;

static void skip_ws_slow(cursor *c) {
  const uint8_t *p = c->p, *end = c->end;
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  c->p = p;
}

/* Headers written by the libraries have no whitespace between tokens: the inlined comparison settles that case (a
 * call per token was 14% of a scan's instructions, callgrind). */
static inline __attribute__((always_inline)) void skip_ws(cursor *c) {
  if (c->p < c->end && *c->p > ' ') return;
  skip_ws_slow(c);
}

static int expect(cursor *c, uint8_t byte) {
  skip_ws(c);
  if (c->p >= c->end || *c->p != byte) return -1;
  c->p++;
  return 0;
}

/* High bit set in exactly the zero bytes of x. */
static uint64_t subset_zero_bytes(uint64_t x) {
  const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL;
  return ~(((x & low7) + low7) | x | low7);
}

/* The bytes of w that end or leave a subset string ('"', '\\', below 0x20, from 0x80): the lowest set bit marks the first exactly (the borrow of the
 * below-0x20 test can only mark bytes after a true one). */
static uint64_t subset_word_stops(uint64_t w) {
  const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
  return subset_zero_bytes(w ^ (0x22 * ones)) | subset_zero_bytes(w ^ (0x5c * ones)) |
         ((w - 0x20 * ones) & ~w & highs) | (w & highs);
}

/*
 * A string of the subset; [*start, *start + *length) are its contents. Eight bytes at a time, the first stop found in
 * its word from the word's bits (a byte loop through the cursor cost ~15 instructions a byte, a third of a warm open
 * of a 48-tensor header; the byte loop over the last word, a quarter of what was left, callgrind).
 */
static int read_string(cursor *c, const uint8_t **start, size_t *length) {
  if (expect(c, '"') != 0) return -1;
  const uint8_t *s = c->p, *p = s, *end = c->end;
  while (end - p >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t stops = subset_word_stops(w);
    if (stops != 0) {
      p += __builtin_ctzll(stops) >> 3;
      goto stop;
    }
    p += 8;
  }
  while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
  if (p >= end) return -1;
stop:
  if (*p != '"') return -1;
  *start = s;
  *length = (size_t)(p - s);
  c->p = p + 1;
  return 0;
}

/* The digits at c->p as an integer of the subset (1 to 15 digits, no leading zero), the cursor moved past them. */
static inline __attribute__((always_inline)) int read_digits(cursor *c, double *out) {
  const uint8_t *s = c->p, *p = s, *end = c->end;
  uint64_t value = 0;
  unsigned digit;
  while (p < end && (digit = (unsigned)*p - '0') <= 9) {
    value = value * 10 + digit;
    p++;
  }
  c->p = p;
  size_t digits = (size_t)(p - s);
  if (digits == 0 || digits > 15 || (digits > 1 && *s == '0')) return -1;
  *out = (double)value;
  return 0;
}

/* An integer of the subset. */
static int read_uint(cursor *c, double *out) {
  skip_ws(c);
  if (read_digits(c, out) != 0) return -1;
  /* 1.5, 1e3, -1 and the like are left to the full reader. */
  if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E')) return -1;
  return 0;
}

static int equals(const uint8_t *s, size_t length, const char *literal) {
  size_t n = strlen(literal);
  return length == n && memcmp(s, literal, n) == 0;
}

typedef struct {
  double *items;
  size_t length;
  size_t capacity;
  int overflow;
} output;

static void emit(output *o, double value) {
  if (o->length < o->capacity) o->items[o->length] = value;
  else o->overflow = 1;
  o->length++;
}

typedef struct {
  const uint8_t *base;
  output *out;
} scan_state;

static double position(const scan_state *st, const uint8_t *p) { return (double)(p - st->base); }

/* [u, u, ...]: emits its count, then the values. */
static int read_uint_list(cursor *c, output *out) {
  if (expect(c, '[') != 0) return -1;
  size_t count_slot = out->length;
  emit(out, 0);
  size_t n = 0;
  skip_ws(c);
  if (c->p < c->end && *c->p == ']') {
    c->p++;
  } else {
    for (;;) {
      double value;
      if (read_uint(c, &value) != 0) return -1;
      emit(out, value);
      n++;
      skip_ws(c);
      if (c->p >= c->end) return -1;
      if (*c->p == ']') {
        c->p++;
        break;
      }
      if (*c->p != ',') return -1;
      c->p++;
    }
  }
  if (count_slot < out->capacity) out->items[count_slot] = (double)n;
  return 0;
}

/* One tensor record (the name is known). */
/*
 * The key of a tensor field: "dtype", "shape" and "data_offsets" compared in place (most strings of a header are these
 * keys), anything else through read_string. 1 dtype, 2 shape, 3 data_offsets, 0 another key, -1 not a subset string.
 */
static int read_field_key(cursor *c) {
  skip_ws(c);
  const uint8_t *p = c->p;
  size_t left = (size_t)(c->end - p);
  if (left >= 8 && memcmp(p, "\"dtype\"", 7) == 0) {
    c->p = p + 7;
    return 1;
  }
  if (left >= 8 && memcmp(p, "\"shape\"", 7) == 0) {
    c->p = p + 7;
    return 2;
  }
  if (left >= 15 && memcmp(p, "\"data_offsets\"", 14) == 0) {
    c->p = p + 14;
    return 3;
  }
  const uint8_t *key;
  size_t key_length;
  if (read_string(c, &key, &key_length) != 0) return -1;
  if (equals(key, key_length, "dtype")) return 1;
  if (equals(key, key_length, "shape")) return 2;
  if (equals(key, key_length, "data_offsets")) return 3;
  return 0;
}

/* Whether the `n` bytes at c->p are `literal`; moves past them if so. */
static int take(cursor *c, const char *literal, size_t n) {
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, literal, n) != 0) return 0;
  c->p += n;
  return 1;
}

/*
 * An entry as the libraries write it, `{"dtype":"X","shape":[u,...],"data_offsets":[u,u]}` with no whitespace: the
 * same records as read_entry in a third of its instructions (a token at a time through expect and read_field_key was
 * ~1,300 instructions an entry, ~60 k of a warm open's scan of a 48-tensor header, callgrind). 0, or -1 with nothing
 * emitted and the cursor where it was: read_entry then reads the entry, in any form the subset takes.
 */
static int read_entry_compact(cursor *c, scan_state *st, const uint8_t *name, size_t name_length) {
  output *out = st->out;
  cursor at = *c;
  size_t length = out->length;
  int overflow = out->overflow;
  if (!take(c, "{\"dtype\":\"", 10)) return -1;
  const uint8_t *dtype = c->p;
  while (c->p < c->end && *c->p != '"' && *c->p != '\\' && *c->p >= 0x20 && *c->p < 0x80) c->p++;
  const uint8_t *dtype_end = c->p;
  if (!take(c, "\",\"shape\":[", 11)) goto other;
  emit(out, 0);
  emit(out, position(st, name));
  emit(out, position(st, name + name_length));
  emit(out, position(st, dtype));
  emit(out, position(st, dtype_end));
  size_t count_slot = out->length;
  emit(out, 0);
  size_t n = 0;
  if (c->p < c->end && *c->p != ']') {
    for (;;) {
      double value;
      if (read_digits(c, &value) != 0) goto other;
      emit(out, value);
      n++;
      if (c->p >= c->end || *c->p != ',') break;
      c->p++;
    }
  }
  if (count_slot < out->capacity) out->items[count_slot] = (double)n;
  double begin, end;
  if (!take(c, "],\"data_offsets\":[", 18) || read_digits(c, &begin) != 0 || !take(c, ",", 1) ||
      read_digits(c, &end) != 0 || !take(c, "]}", 2))
    goto other;
  emit(out, begin);
  emit(out, end);
  return 0;
other:
  *c = at;
  out->length = length;
  out->overflow = overflow;
  return -1;
}

static int read_entry(cursor *c, scan_state *st, const uint8_t *name, size_t name_length) {
  output *out = st->out;
  skip_ws(c);
  if (read_entry_compact(c, st, name, name_length) == 0) return 0;
  if (expect(c, '{') != 0) return -1;
  int seen_dtype = 0, seen_shape = 0, seen_offsets = 0;
  const uint8_t *dtype = NULL;
  size_t dtype_length = 0;
  double offsets[2] = {0, 0};
  emit(out, 0);
  emit(out, position(st, name));
  emit(out, position(st, name + name_length));
  size_t dtype_slot = out->length;
  emit(out, 0);
  emit(out, 0);
  for (;;) {
    int field = read_field_key(c);
    if (field <= 0 || expect(c, ':') != 0) return -1;
    if (field == 1 && !seen_dtype) {
      if (read_string(c, &dtype, &dtype_length) != 0) return -1;
      seen_dtype = 1;
    } else if (field == 2 && !seen_shape) {
      if (read_uint_list(c, out) != 0) return -1;
      seen_shape = 1;
    } else if (field == 3 && !seen_offsets) {
      if (expect(c, '[') != 0 || read_uint(c, &offsets[0]) != 0 || expect(c, ',') != 0 ||
          read_uint(c, &offsets[1]) != 0 || expect(c, ']') != 0)
        return -1;
      seen_offsets = 1;
    } else {
      return -1;
    }
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == '}') break;
    if (*c->p != ',') return -1;
    c->p++;
  }
  c->p++; /* '}' */
  if (!seen_dtype || !seen_shape || !seen_offsets) return -1;
  if (dtype_slot + 1 < out->capacity) {
    out->items[dtype_slot] = position(st, dtype);
    out->items[dtype_slot + 1] = position(st, dtype + dtype_length);
  }
  emit(out, offsets[0]);
  emit(out, offsets[1]);
  return 0;
}

static int read_metadata(cursor *c, scan_state *st) {
  output *out = st->out;
  skip_ws(c);
  if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
    c->p += 4; /* the same as no metadata */
    return 0;
  }
  if (expect(c, '{') != 0) return -1;
  emit(out, 2);
  skip_ws(c);
  if (c->p < c->end && *c->p == '}') {
    c->p++;
    return 0;
  }
  for (;;) {
    const uint8_t *key, *value;
    size_t key_length, value_length;
    if (read_string(c, &key, &key_length) != 0 || expect(c, ':') != 0 ||
        read_string(c, &value, &value_length) != 0)
      return -1;
    emit(out, 1);
    emit(out, position(st, key));
    emit(out, position(st, key + key_length));
    emit(out, position(st, value));
    emit(out, position(st, value + value_length));
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == '}') {
      c->p++;
      return 0;
    }
    if (*c->p != ',') return -1;
    c->p++;
  }
}

/*
 * Tensor names seen so far (open addressing over FNV-1a hashes), so that a repeated name sends the header to the full
 * reader: the caller then needs no name-to-index map at open, where hashing every name as a JavaScript string was
 * ~10% of a warm open (it builds one on the first lookup by name instead).
 */
typedef struct {
  const uint8_t **names;
  uint32_t *lengths;
  size_t mask;
} name_set;

/* Eight bytes a step (a byte-wise FNV-1a was a tenth of a scan); only where names land in the table depends on it. */
static uint64_t name_hash(const uint8_t *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  memcpy(&tail, s + i, n - i);
  h = (h ^ tail) * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 32);
}

/* 0 when added, 1 when already there. */
static int name_set_add(name_set *set, const uint8_t *name, size_t length) {
  size_t i = (size_t)name_hash(name, length) & set->mask;
  while (set->names[i] != NULL) {
    if (set->lengths[i] == length && memcmp(set->names[i], name, length) == 0) return 1;
    i = (i + 1) & set->mask;
  }
  set->names[i] = name;
  set->lengths[i] = (uint32_t)length;
  return 0;
}

/* The smallest entry of the subset, `"":{"dtype":"","shape":[],"data_offsets":[0,0]}`, plus a comma. */
#define MIN_ENTRY_BYTES 48

static int scan_entries(cursor *c, scan_state *st, name_set *set);

static int scan(const uint8_t *bytes, size_t length, output *out) {
  cursor c = {bytes, bytes + length};
  scan_state st = {bytes, out};
  /* At most length / MIN_ENTRY_BYTES + 1 names: a table of at least twice as many slots stays under half full. */
  size_t slots = 16;
  while (slots < 2 * (length / MIN_ENTRY_BYTES + 1)) slots <<= 1;
  /* 512 slots (6 KB) hold the names of any header up to ~12 KB without an allocation: calloc'ing the table for a
   * 5 KB header was ~10% of a cold loadFile's native part. */
  const uint8_t *small_names[512];
  uint32_t small_lengths[512];
  name_set set = {small_names, small_lengths, slots - 1};
  if (slots <= 512) {
    memset(small_names, 0, slots * sizeof *small_names);
  } else {
    set.names = calloc(slots, sizeof *set.names);
    set.lengths = malloc(slots * sizeof *set.lengths);
    if (set.names == NULL || set.lengths == NULL) {
      free(set.names);
      free(set.lengths);
      return -1;
    }
  }
  int result = scan_entries(&c, &st, &set);
  if (slots > 512) {
    free(set.names);
    free(set.lengths);
  }
  return result;
}

static int scan_entries(cursor *c_, scan_state *st_, name_set *set) {
  cursor c = *c_;
  scan_state st = *st_;
  int saw_metadata = 0;
  if (expect(&c, '{') != 0) return -1;
  skip_ws(&c);
  if (c.p < c.end && *c.p == '}') {
    c.p++;
  } else {
    for (;;) {
      const uint8_t *name;
      size_t name_length;
      if (read_string(&c, &name, &name_length) != 0 || expect(&c, ':') != 0) return -1;
      if (equals(name, name_length, "__metadata__")) {
        if (saw_metadata || read_metadata(&c, &st) != 0) return -1;
        saw_metadata = 1;
      } else if (name_set_add(set, name, name_length) != 0 || read_entry(&c, &st, name, name_length) != 0) {
        return -1;
      }
      skip_ws(&c);
      if (c.p >= c.end) return -1;
      if (*c.p == '}') {
        c.p++;
        break;
      }
      if (*c.p != ',') return -1;
      c.p++;
    }
  }
  skip_ws(&c);
  return c.p == c.end ? 0 : -1;
}

static int typed_array(napi_env env, napi_value value, napi_typedarray_type want, void **data, size_t *length) {
  bool is_typedarray = false;
  napi_typedarray_type type;
  return napi_is_typedarray(env, value, &is_typedarray) == napi_ok && is_typedarray &&
                 napi_get_typedarray_info(env, value, &type, length, data, NULL, NULL) == napi_ok && type == want
             ? 0
             : -1;
}

napi_value st_js_scan_header(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], result = NULL;
  void *bytes = NULL, *items = NULL;
  size_t length = 0, capacity = 0;
  double answer = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= 2 &&
      typed_array(env, argv[0], napi_uint8_array, &bytes, &length) == 0 &&
      typed_array(env, argv[1], napi_float64_array, &items, &capacity) == 0) {
    output out = {items, 0, capacity, 0};
    if (scan(bytes, length, &out) == 0) answer = out.overflow ? -2 : (double)out.length;
  }
  napi_create_double(env, answer, &result);
  return result;
}

/*
 * Checked scans: the scanner's records with the rules of src/format/scanned.ts applied here, so that a caller that
 * wants every tensor at once (loadFile's views, native/safetensors_native.c loadViews) builds nothing per tensor in
 * JavaScript but the tensor itself. The rules are the same, to the letter: tensors in file order tiling the data
 * region from 0 with no gap, a known dtype, every partial product of bits and dims exact (at most 2^53), whole bytes,
 * the span the shape needs, no repeated metadata key, and the data region ending at the end of the file. Anything
 * else answers -1 and the caller reads the file the ordinary way, whose full reader decides (test/scanned.test.ts
 * checks both give the same tensors, or both refuse, on every case it has).
 *
 * Output (doubles): T, S, then per tensor nameStart, nameEnd, dtype index, shape index, begin, byte length (begin
 * relative to the data region), then S distinct shapes as ndim, dims... Tensors of one shape share it: a model's
 * layers repeat a few shapes (48 tensors of the benchmark's checkpoint have 6), and JavaScript makes one frozen
 * array per distinct shape.
 */
#define MAX_METADATA_CHECKED 64
/* Distinct shapes compared against; past this many, a shape is added without looking (never wrong, only less shared). */
#define MAX_SHAPES_COMPARED 32
/* Largest integer a double holds exactly, and every smaller one. */
#define MAX_SAFE_BITS 9007199254740991.0

/* "BOOL,F4,..." with one bit width per name (src/format/dtypes.ts, passed by the caller). 0, or -1 if malformed. */
int st_dtype_table_parse(dtype_table *table, const char *names, size_t length, const double *bits, size_t nbits) {
  table->count = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= length; i++) {
    if (i < length && names[i] != ',') continue;
    if (table->count >= MAX_DTYPES || table->count >= nbits || i == begin) return -1;
    table->name[table->count] = names + begin;
    table->length[table->count] = i - begin;
    table->bits[table->count] = bits[table->count];
    table->count++;
    begin = i + 1;
  }
  return 0;
}

static int dtype_index(const dtype_table *table, const uint8_t *s, size_t n) {
  for (size_t i = 0; i < table->count; i++) {
    if (table->length[i] == n && memcmp(table->name[i], s, n) == 0) return (int)i;
  }
  return -1;
}

/* 0: `capacity` numbers at `out` hold the output and *written says how many; -2: *written is how many it needs;
 * -1: not a header of the checked form (the caller reads it the ordinary way). */
int st_scan_checked(const uint8_t *bytes, size_t length, double file_length, const dtype_table *dtypes, double *out,
                    size_t capacity, size_t *written) {
  /* Records and distinct shapes in buffers on the stack when they fit (a 48-tensor header needs ~500 numbers), else
   * on the heap: the first malloc of ~40 KB in a process after a GC cost ~50 k instructions (malloc_consolidate). */
  double small_records[2048];
  size_t small_distinct[256];
  double *records = small_records;
  size_t *distinct = small_distinct;
  int result = -1;
  output rec = {records, 0, sizeof small_records / sizeof *small_records, 0};
  if (scan(bytes, length, &rec) != 0) goto done;
  if (rec.overflow) {
    /* rec.length is how many numbers the records take. */
    size_t need_records = rec.length;
    records = malloc(need_records * sizeof *records);
    if (records == NULL) goto done;
    rec = (output){records, 0, need_records, 0};
    if (scan(bytes, length, &rec) != 0 || rec.overflow) goto done;
  }
  /* At most one distinct shape per tensor, and every tensor record holds at least 8 numbers. */
  if (rec.length / 8 + 1 > sizeof small_distinct / sizeof *small_distinct) {
    distinct = malloc((rec.length / 8 + 1) * sizeof *distinct);
    if (distinct == NULL) goto done;
  }

  size_t tensors = 0, shapes = 0, need = 2;
  size_t metadata_keys[MAX_METADATA_CHECKED];
  size_t metadata_count = 0;
  int metadata = 0;
  double position = 0;
  for (size_t at = 0; at < rec.length;) {
    double tag = records[at++];
    if (tag == 2) {
      metadata = 1;
      continue;
    }
    if (tag == 1) {
      size_t key_length = (size_t)(records[at + 1] - records[at]);
      if (!metadata || metadata_count >= MAX_METADATA_CHECKED) goto done;
      for (size_t i = 0; i < metadata_count; i++) {
        size_t other = metadata_keys[i];
        if ((size_t)(records[other + 1] - records[other]) == key_length &&
            memcmp(bytes + (size_t)records[other], bytes + (size_t)records[at], key_length) == 0)
          goto done;
      }
      metadata_keys[metadata_count++] = at;
      at += 4;
      continue;
    }
    if (tag != 0) goto done;
    double name_start = records[at], name_end = records[at + 1];
    int dtype = dtype_index(dtypes, bytes + (size_t)records[at + 2], (size_t)(records[at + 3] - records[at + 2]));
    if (dtype < 0) goto done;
    at += 4;
    size_t shape_record = at;
    size_t ndim = (size_t)records[at++];
    double bits = dtypes->bits[dtype];
    for (size_t d = 0; d < ndim; d++) {
      bits *= records[at++];
      if (bits > MAX_SAFE_BITS) goto done;
    }
    double begin = records[at++], end = records[at++];
    if (begin != position || fmod(bits, 8) != 0 || end - begin != bits / 8) goto done;
    position = end;
    size_t shape = shapes;
    for (size_t s = 0; s < shapes && s < MAX_SHAPES_COMPARED; s++) {
      size_t other = distinct[s];
      if (records[other] != (double)ndim) continue;
      size_t d = 0;
      while (d < ndim && records[other + 1 + d] == records[shape_record + 1 + d]) d++;
      if (d == ndim) {
        shape = s;
        break;
      }
    }
    if (shape == shapes) {
      distinct[shapes++] = shape_record;
      need += 1 + ndim;
    }
    size_t slot = 2 + tensors * 6;
    if (slot + 6 <= capacity) {
      out[slot] = name_start;
      out[slot + 1] = name_end;
      out[slot + 2] = (double)dtype;
      out[slot + 3] = (double)shape;
      out[slot + 4] = begin;
      out[slot + 5] = end - begin;
    }
    tensors++;
    need += 6;
  }
  if (position + 8 + (double)length != file_length) goto done;
  *written = need;
  if (need > capacity) {
    result = -2;
    goto done;
  }
  out[0] = (double)tensors;
  out[1] = (double)shapes;
  size_t put = 2 + tensors * 6;
  for (size_t s = 0; s < shapes; s++) {
    size_t ndim = (size_t)records[distinct[s]];
    memcpy(out + put, records + distinct[s], (1 + ndim) * sizeof *out);
    put += 1 + ndim;
  }
  result = 0;
done:
  if (records != small_records) free(records);
  if (distinct != small_distinct) free(distinct);
  return result;
}

/* scanChecked(bytes: Uint8Array, fileLength, out: Float64Array, dtypeNames: string, dtypeBits: Float64Array) ->
 * numbers written to `out`, -1 (not the checked form) or -2 (`out` too small). What loadViews runs, on bytes. */
napi_value st_js_scan_checked(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5], result = NULL;
  void *bytes = NULL, *items = NULL, *bits = NULL;
  size_t length = 0, capacity = 0, nbits = 0, names_length = 0;
  double file_length = 0, answer = -1;
  char names[1024];
  dtype_table table;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= 5 &&
      typed_array(env, argv[0], napi_uint8_array, &bytes, &length) == 0 &&
      napi_get_value_double(env, argv[1], &file_length) == napi_ok &&
      typed_array(env, argv[2], napi_float64_array, &items, &capacity) == 0 &&
      napi_get_value_string_utf8(env, argv[3], names, sizeof names, &names_length) == napi_ok &&
      typed_array(env, argv[4], napi_float64_array, &bits, &nbits) == 0 &&
      st_dtype_table_parse(&table, names, names_length, bits, nbits) == 0) {
    size_t written = 0;
    int got = st_scan_checked(bytes, length, file_length, &table, items, capacity, &written);
    answer = got == 0 ? (double)written : got;
  }
  napi_create_double(env, answer, &result);
  return result;
}

/*
 * Hostile-header helpers for the JavaScript reader (src/format/json.ts, src/format/header.ts). Neither decides a
 * verdict: the reader always does, and these only save it time on headers of ~100 MB, where a JavaScript byte loop
 * costs ~50 ms per pass once optimized and seconds while V8's optimizing compiler has no free core to run on.
 *
 * scanRun(bytes: Uint8Array, from: number, kind: number) -> the first position >= from whose byte ends the run:
 *   kind 0: not an ASCII digit; 1: not JSON whitespace; 2: a `"`, a `\` or a byte below 0x20 (plain string contents).
 *
 * findSyntaxError(bytes: Uint8Array) -> the position of a JSON syntax error inside the top-level value, or -1 when it
 * finds none. It knows the grammar, strings and escapes (control characters, invalid escapes, lone surrogates), the
 * nesting limit (127 levels, serde_json's) and the end of input; it does not judge numbers' ranges, and says nothing
 * of what follows the top-level value. The reader uses a found error to skip the tensor entries' checks, which cannot
 * take precedence over a syntax error; it still finds and reports the error itself, and reads the header in full if
 * it finds none.
 */

#define MAX_DEPTH 127

static int is_ws(uint8_t b) { return b == ' ' || b == '\n' || b == '\r' || b == '\t'; }

/* Eight bytes at a time where aligned: a run of 100 M digits is memory bandwidth, not a loop per byte. */
static uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether byte c ends a run of `kind`. */
static int run_stops(uint8_t c, int kind) {
  if (kind == 0) return !(c >= '0' && c <= '9');
  if (kind == 1) return !is_ws(c);
  return c == '"' || c == '\\' || c < 0x20;
}

/* High bit set in exactly the zero bytes of x. */
static uint64_t zero_bytes(uint64_t x) {
  const uint64_t low7 = 0x7f * ONES;
  return ~(((x & low7) + low7) | x | low7);
}

/* Whether all eight bytes of w continue a run of `kind` (false may also mean "look at each byte"). */
static int word_continues(uint64_t w, int kind) {
  if (kind == 0) {
    uint64_t y = w ^ (0x30 * ONES);
    return (((y + 0x76 * ONES) | y) & HIGHS) == 0; /* a byte above 9 after ^0x30 (see allDigits in json.ts) */
  }
  if (kind == 1) {
    uint64_t ws = zero_bytes(w ^ (0x20 * ONES)) | zero_bytes(w ^ (0x09 * ONES)) | zero_bytes(w ^ (0x0a * ONES)) |
                  zero_bytes(w ^ (0x0d * ONES));
    return ws == HIGHS;
  }
  uint64_t stops = zero_bytes(w ^ (0x22 * ONES)) | zero_bytes(w ^ (0x5c * ONES)) | ((w - 0x20 * ONES) & ~w & HIGHS);
  return stops == 0;
}

static size_t run_end(const uint8_t *b, size_t n, size_t pos, int kind) {
  for (;;) {
    while (pos + 8 <= n && word_continues(load64(b + pos), kind)) pos += 8;
    size_t stop = pos + 8 < n ? pos + 8 : n;
    for (; pos < stop; pos++)
      if (run_stops(b[pos], kind)) return pos;
    if (pos >= n) return n;
  }
}

static int hex4(const uint8_t *b, size_t n, size_t pos, unsigned *unit) {
  if (pos + 4 > n) return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    uint8_t c = b[pos + i];
    unsigned d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v * 16 + d;
  }
  *unit = v;
  return 0;
}

/* A string whose opening quote is at *pos: 0 with *pos past its closing quote, or -1 with *pos at the error. */
static int syntax_string(const uint8_t *b, size_t n, size_t *pos) {
  size_t p = *pos + 1;
  for (;;) {
    p = run_end(b, n, p, 2);
    if (p >= n) break;
    uint8_t c = b[p];
    if (c == '"') {
      *pos = p + 1;
      return 0;
    }
    if (c < 0x20) break;
    /* an escape */
    if (p + 1 >= n) break;
    uint8_t e = b[p + 1];
    if (e == 'u') {
      unsigned unit, low;
      if (hex4(b, n, p + 2, &unit) != 0) break;
      p += 6;
      if (unit >= 0xdc00 && unit <= 0xdfff) break;
      if (unit >= 0xd800 && unit <= 0xdbff) {
        if (p + 1 >= n || b[p] != '\\' || b[p + 1] != 'u' || hex4(b, n, p + 2, &low) != 0) break;
        if (low < 0xdc00 || low > 0xdfff) break;
        p += 6;
      }
    } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
      p += 2;
    } else {
      break;
    }
  }
  *pos = p;
  return -1;
}

/* A number's grammar (not its range). */
static int syntax_number(const uint8_t *b, size_t n, size_t *pos) {
  size_t p = *pos;
  if (b[p] == '-') p++;
  if (p >= n) goto fail;
  if (b[p] == '0') {
    p++;
    if (p < n && b[p] >= '0' && b[p] <= '9') goto fail;
  } else if (b[p] >= '1' && b[p] <= '9') {
    p = run_end(b, n, p, 0);
  } else {
    goto fail;
  }
  if (p < n && b[p] == '.') {
    p++;
    if (p >= n || !(b[p] >= '0' && b[p] <= '9')) goto fail;
    p = run_end(b, n, p, 0);
  }
  if (p < n && (b[p] == 'e' || b[p] == 'E')) {
    p++;
    if (p < n && (b[p] == '+' || b[p] == '-')) p++;
    if (p >= n || !(b[p] >= '0' && b[p] <= '9')) goto fail;
    p = run_end(b, n, p, 0);
  }
  *pos = p;
  return 0;
fail:
  *pos = p;
  return -1;
}

static double find_syntax_error(const uint8_t *b, size_t n) {
  uint8_t stack[MAX_DEPTH + 1]; /* 1: object, 0: array */
  int depth = 0;
  size_t p = run_end(b, n, 0, 1);
  if (p >= n || b[p] != '{') return -1; /* the reader judges other top-level values at once */
  for (;;) {
    /* a value at p (whitespace skipped) */
    if (p >= n) return (double)p;
    uint8_t c = b[p];
    if (c == '{' || c == '[') {
      if (++depth > MAX_DEPTH) return (double)p;
      stack[depth] = c == '{';
      p = run_end(b, n, p + 1, 1);
      if (p < n && b[p] == (c == '{' ? '}' : ']')) {
        p++;
        depth--;
      } else if (c == '{') {
        goto key;
      } else {
        continue;
      }
    } else if (c == '"') {
      if (syntax_string(b, n, &p) != 0) return (double)p;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (syntax_number(b, n, &p) != 0) return (double)p;
    } else if (c == 't' || c == 'f' || c == 'n') {
      const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
      size_t len = strlen(word);
      if (p + len > n || memcmp(b + p, word, len) != 0) return (double)p;
      p += len;
    } else {
      return (double)p;
    }
    /* after a value */
    for (;;) {
      if (depth == 0) return -1;
      p = run_end(b, n, p, 1);
      if (p >= n) return (double)p;
      c = b[p];
      if (c == (stack[depth] ? '}' : ']')) {
        p++;
        depth--;
        continue;
      }
      if (c != ',') return (double)p;
      p = run_end(b, n, p + 1, 1);
      if (p < n && b[p] == (stack[depth] ? '}' : ']')) return (double)p; /* trailing comma */
      if (stack[depth]) goto key;
      break;
    }
    continue;
  key:
    if (p >= n || b[p] != '"' || syntax_string(b, n, &p) != 0) return (double)p;
    p = run_end(b, n, p, 1);
    if (p >= n || b[p] != ':') return (double)p;
    p = run_end(b, n, p + 1, 1);
  }
}

napi_value st_js_scan_run(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], result = NULL;
  void *bytes = NULL;
  size_t length = 0;
  double from = 0, kind = 0, answer = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= 3 &&
      typed_array(env, argv[0], napi_uint8_array, &bytes, &length) == 0 &&
      napi_get_value_double(env, argv[1], &from) == napi_ok && napi_get_value_double(env, argv[2], &kind) == napi_ok &&
      from >= 0 && kind >= 0 && kind <= 2) {
    size_t start = from < (double)length ? (size_t)from : length;
    answer = (double)run_end(bytes, length, start, (int)kind);
  }
  napi_create_double(env, answer, &result);
  return result;
}

napi_value st_js_find_syntax_error(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result = NULL;
  void *bytes = NULL;
  size_t length = 0;
  double answer = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= 1 &&
      typed_array(env, argv[0], napi_uint8_array, &bytes, &length) == 0) {
    answer = find_syntax_error(bytes, length);
  }
  napi_create_double(env, answer, &result);
  return result;
}
