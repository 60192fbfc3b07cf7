/*
 * The undo journal's hot path (src/edit/journal.ts, format version 3), part of the main addon:
 *
 *   crc32c(bytes: Uint8Array, crc: number) -> number
 *       CRC-32C (Castagnoli) of `bytes` continuing `crc` (0 to start; crc32c(B, crc32c(A, 0)) is the CRC of A then
 *       B), with the CPU's CRC32 instruction where there is one (x86-64 SSE4.2, ARMv8 CRC), else a table.
 *   journalRanges(journalFd, at, crc, prefix: Uint8Array, fd, offsets: Float64Array, lengths: Float64Array,
 *                 sync: boolean) -> number
 *       Journal the bytes now at [offsets[i], offsets[i] + lengths[i]) of `fd`: writes, at `at` of the journal,
 *       `prefix` (the journal's header before its first record, or nothing) then one record per range,
 *       u64 offset · u64 length · u32 CRC · the old bytes · u32 CRC, each CRC the CRC-32C running over the
 *       journal up to it (continuing `crc`, the stored CRCs left out), all with positional vectored writes, then
 *       fdatasync when `sync`. Returns the last CRC (what the next record continues). Everything is written when
 *       it returns.
 *
 *   journalBegin(journalPath, fileSize, group: Uint8Array, nonce, sync, fd, offsets, lengths, writeFd,
 *                data: Uint8Array | null, repeat, out: Float64Array) -> undefined
 *       An edit's first write in one call: create the journal (O_EXCL: EEXIST when one exists), write its header
 *       ("STJRNL03" · file size · group length · group · nonce · CRC) and one record per range as journalRanges does,
 *       fdatasync it and its directory when `sync`, then write `data` over the ranges through `writeFd` (`repeat`: a
 *       block repeated from each range's start; else the ranges' bytes back to back; null: no data write). `out`
 *       gets the journal's fd (-1 when no journal is left: a failure before the records were complete removes it),
 *       its end, the last CRC, and 1 once the data is written; a failed data write throws with the journal kept.
 *   journalFill(journalPath, fileSize, group, nonce, sync, fd, offset, length, block: Uint8Array | null,
 *               out: Float64Array) -> undefined
 *       journalBegin for the one range [offset, offset + length) of `fd`, its new bytes `block` repeated (null:
 *       zeros), written through `fd` itself: an edit's first fill, with no arrays to make for it.
 *   journalEnd(journalFd, journalPath) -> undefined
 *       Close the journal (fd ≥ 0) and unlink it: the commit point (no error when it is already gone).
 *   openWritable(path, dev, ino) -> fd
 *       The file opened read-write, ESTALE unless it is still the file (st_dev, st_ino) whose header was read.
 *
 *   writeRepeated(fd, block: Uint8Array, offset, length) -> undefined
 *       Write `block` repeated (the last copy cut short) over [offset, offset + length) of `fd`: a fill's data
 *       write, in vectored writes of up to 1024 copies of the same block.
 *
 * Why in C (measured in a fresh Node process, 1 MiB of old bytes, ext4, page cache warm): the old bytes are read
 * through a shared read-only mapping of the ranges (cached pages, mapped 16 per fault) and go from there into the
 * journal's write, so they are never copied into fresh memory of this process (whose first touch costs ~2 µs a page
 * here, up to ~16 µs on other machines: 256 pages for 1 MiB); CRC-32C over them in three interleaved streams takes
 * 0.04 ms where SHA-256 in node:crypto took 0.6 ms (plus ~0.5 ms for the first createHash of a process) and one
 * stream of the instruction 0.11 ms.
 *
 * The file must not shrink under an edit (reading a mapped page past the end would raise SIGBUS): the same contract
 * as the mmap readers. Errors are thrown as JS Errors whose `code` is the errno name.
 */
#define _GNU_SOURCE
#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"
#include "journal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define ST_CRC_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define ST_CRC_ARM 1
#elif defined(__aarch64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
/* A generic arm64 build (the prebuilt binary): the CRC instructions in functions compiled for them, used when the
 * kernel says the CPU has them (optional in ARMv8.0, present on every server and phone core since). */
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#define ST_CRC_ARM 1
#define ST_CRC_ARM_DETECT 1
#endif

/* CRC-32C, reflected polynomial. */
#define POLY 0x82f63b78u
/* Records per vectored write: three pieces each, within the 1024 buffers Linux and macOS take per call. */
#define RECORDS_PER_WRITE 300
/* Longest path taken (PATH_MAX on Linux). */
#define MAX_PATH_BYTES 4096

/* ------------------------------------------------------------------------------------------------------ */
/* CRC-32C */

static uint32_t table[8][256];
static uint32_t x2n[32]; /* x^(2^k) mod POLY */
static bool hardware;

/* a·b mod POLY (reflected bit order: the top bit is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = (uint32_t)1 << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
  }
  return p;
}

/* x^(8·n) mod POLY: the operator that appends n zero bytes. */
static uint32_t zeros_operator(uint64_t n) {
  uint32_t p = (uint32_t)1 << 31; /* x^0 */
  for (unsigned k = 3; n != 0; n >>= 1, k++) {
    if (n & 1) p = multmodp(x2n[k & 31], p);
  }
  return p;
}

/* The CRC of A then B from crc(A), crc(B) and the length of B. */
static uint32_t crc_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return multmodp(zeros_operator(length_b), crc_a) ^ crc_b;
}

static void crc_init(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    table[0][n] = c;
  }
  for (uint32_t n = 0; n < 256; n++) {
    for (int k = 1; k < 8; k++) table[k][n] = (table[k - 1][n] >> 8) ^ table[0][table[k - 1][n] & 0xff];
  }
  uint32_t p = (uint32_t)1 << 30; /* x^1 */
  x2n[0] = p;
  for (int k = 1; k < 32; k++) x2n[k] = p = multmodp(p, p);
#if defined(ST_CRC_X86)
  __builtin_cpu_init();
  hardware = __builtin_cpu_supports("sse4.2");
#elif defined(ST_CRC_ARM_DETECT)
  hardware = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#elif defined(ST_CRC_ARM)
  hardware = true;
#endif
}

/* Slicing by 8 (the table path). `c` is the raw register (not inverted). */
static uint32_t crc_table_raw(uint32_t c, const uint8_t *p, size_t n) {
  while (n >= 8) {
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
        table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(ST_CRC_X86) || defined(ST_CRC_ARM)
#if defined(ST_CRC_X86)
#define HW_TARGET __attribute__((target("sse4.2")))
#define CRC8(c, v) ((uint32_t)_mm_crc32_u64((c), (v)))
#define CRC1(c, v) _mm_crc32_u8((c), (v))
#else
#if defined(ST_CRC_ARM_DETECT) && defined(__clang__)
#define HW_TARGET __attribute__((target("crc")))
#elif defined(ST_CRC_ARM_DETECT)
#define HW_TARGET __attribute__((target("+crc")))
#else
#define HW_TARGET
#endif
#define CRC8(c, v) __crc32cd((c), (v))
#define CRC1(c, v) __crc32cb((c), (v))
#endif

HW_TARGET static uint32_t crc_hw_raw(uint32_t c, const uint8_t *p, size_t n) {
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = CRC8(c, v);
    p += 8;
    n -= 8;
  }
  while (n--) c = CRC1(c, *p++);
  return c;
}

/*
 * Three independent streams over three thirds (the instruction has a latency of three cycles and a throughput of
 * one), joined with crc_combine: 2.7× one stream on 1 MiB.
 */
HW_TARGET static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
  if (n >= 3 * 4096) {
    size_t third = n / 3 / 8 * 8;
    const uint8_t *p1 = p + third, *p2 = p + 2 * third;
    uint32_t a = ~crc, b = 0xffffffffu, c = 0xffffffffu;
    for (size_t i = 0; i < third; i += 8) {
      uint64_t x, y, z;
      memcpy(&x, p + i, 8);
      memcpy(&y, p1 + i, 8);
      memcpy(&z, p2 + i, 8);
      a = CRC8(a, x);
      b = CRC8(b, y);
      c = CRC8(c, z);
    }
    crc = crc_combine(crc_combine(~a, ~b, third), ~c, third);
    p += 3 * third;
    n -= 3 * third;
  }
  return ~crc_hw_raw(~crc, p, n);
}
#endif

static uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#if defined(ST_CRC_X86) || defined(ST_CRC_ARM)
  if (hardware) return crc_hw(crc, p, n);
#endif
  return ~crc_table_raw(~crc, p, n);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Node-API glue */

static napi_value throw_errno(napi_env env, int err, const char *what) {
  st_throw_errno(env, err, what);
  return NULL;
}

static napi_value throw_type(napi_env env, const char *message) {
  napi_throw_type_error(env, "EINVAL", message);
  return NULL;
}

static bool get_u8(napi_env env, napi_value value, const uint8_t **data, size_t *length) {
  napi_typedarray_type type;
  void *base = NULL;
  if (napi_get_typedarray_info(env, value, &type, length, &base, NULL, NULL) != napi_ok || type != napi_uint8_array) {
    return false;
  }
  *data = base;
  return true;
}

static bool get_f64(napi_env env, napi_value value, const double **data, size_t *length) {
  napi_typedarray_type type;
  void *base = NULL;
  if (napi_get_typedarray_info(env, value, &type, length, &base, NULL, NULL) != napi_ok || type != napi_float64_array) {
    return false;
  }
  *data = base;
  return true;
}

static bool get_int(napi_env env, napi_value value, int32_t *out) {
  return napi_get_value_int32(env, value, out) == napi_ok;
}

static bool get_position(napi_env env, napi_value value, double *out) {
  if (napi_get_value_double(env, value, out) != napi_ok) return false;
  return *out >= 0 && *out <= MAX_SAFE_INTEGER && *out == (double)(int64_t)*out;
}

static bool get_crc(napi_env env, napi_value value, uint32_t *out) {
  double d;
  if (napi_get_value_double(env, value, &d) != napi_ok || !(d >= 0 && d <= 4294967295.0) || d != (double)(uint32_t)d) {
    return false;
  }
  *out = (uint32_t)d;
  return true;
}

/* A path argument into `path` (MAX_PATH_BYTES + 1 bytes): 0, EINVAL (not a string) or ENAMETOOLONG (too long, or a
 * NUL byte inside). */
static int get_path(napi_env env, napi_value value, char *path) {
  size_t length = 0;
  if (napi_get_value_string_utf8(env, value, path, MAX_PATH_BYTES + 1, &length) != napi_ok) return EINVAL;
  return length >= MAX_PATH_BYTES || strlen(path) != length ? ENAMETOOLONG : 0;
}

static napi_value make_crc(napi_env env, uint32_t crc) {
  napi_value v = NULL;
  napi_create_uint32(env, crc, &v);
  return v;
}

napi_value st_js_crc32c(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2) {
    return throw_type(env, "crc32c(bytes, crc)");
  }
  const uint8_t *p;
  size_t n;
  uint32_t crc;
  if (!get_u8(env, argv[0], &p, &n) || !get_crc(env, argv[1], &crc)) return throw_type(env, "crc32c(bytes, crc)");
  return make_crc(env, crc32c(crc, p, n));
}

static void put_u64(uint8_t *out, uint64_t v) {
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (8 * i));
}

/* Write every buffer of `iov` at `at` (continuing short writes). 0 or an errno. */
static int write_all(int fd, struct iovec *iov, int count, off_t at) {
  while (count > 0) {
    ssize_t done = pwritev(fd, iov, count, at);
    if (done < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (done == 0) return EIO;
    at += done;
    while (count > 0 && (size_t)done >= iov->iov_len) {
      done -= (ssize_t)iov->iov_len;
      iov++;
      count--;
    }
    if (count > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + done;
      iov->iov_len -= (size_t)done;
    }
  }
  return 0;
}

typedef struct {
  uint8_t fields[20]; /* offset, length, CRC through them */
  uint8_t crc[4];     /* CRC through the old bytes */
} record_frame;

/*
 * Write `prefix` then one record per range (the bytes now at [offsets[i], offsets[i] + lengths[i]) of `fd`) at `at`
 * of the journal; *crc continues the chain and gets its last value. Ranges sorted, disjoint, non-empty (checked by
 * the caller). 0 or an errno.
 */
static int write_records(int journal_fd, off_t at, uint32_t *crc_io, const uint8_t *prefix, size_t prefix_length,
                         int fd, const double *offsets, const double *lengths, size_t count) {
  if (count == 0) {
    if (prefix_length == 0) return 0;
    struct iovec one = {(void *)prefix, prefix_length};
    return write_all(journal_fd, &one, 1, at);
  }
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  /* One mapping over the span of all ranges. */
  uint64_t map_start = (uint64_t)offsets[0] / (uint64_t)page * (uint64_t)page;
  uint64_t map_length = (uint64_t)(offsets[count - 1] + lengths[count - 1]) - map_start;
  if (map_length > (uint64_t)SIZE_MAX / 2) return EFBIG;
  uint8_t *map = mmap(NULL, (size_t)map_length, PROT_READ, MAP_SHARED, fd, (off_t)map_start);
  if (map == MAP_FAILED) return errno;
  /* Sized by the records (a VLA): an edit's first call runs on stack pages the process has not touched yet, and
   * each costs a fault (see write_repeated). */
  size_t room = count < RECORDS_PER_WRITE ? count : RECORDS_PER_WRITE;
  record_frame frames[room];
  struct iovec iov[1 + 3 * room];
  uint32_t crc = *crc_io;
  int err = 0;
  for (size_t first = 0; first < count && err == 0; first += RECORDS_PER_WRITE) {
    size_t batch = count - first < RECORDS_PER_WRITE ? count - first : RECORDS_PER_WRITE;
    int n = 0;
    off_t batch_at = at;
    if (first == 0 && prefix_length > 0) {
      iov[n].iov_base = (void *)prefix;
      iov[n++].iov_len = prefix_length;
      at += (off_t)prefix_length;
    }
    for (size_t i = 0; i < batch; i++) {
      uint64_t offset = (uint64_t)offsets[first + i], length = (uint64_t)lengths[first + i];
      const uint8_t *old = map + (offset - map_start);
      record_frame *frame = &frames[i];
      put_u64(frame->fields, offset);
      put_u64(frame->fields + 8, length);
      crc = crc32c(crc, frame->fields, 16);
      for (int b = 0; b < 4; b++) frame->fields[16 + b] = (uint8_t)(crc >> (8 * b));
      crc = crc32c(crc, old, (size_t)length);
      for (int b = 0; b < 4; b++) frame->crc[b] = (uint8_t)(crc >> (8 * b));
      iov[n].iov_base = frame->fields;
      iov[n++].iov_len = 20;
      iov[n].iov_base = (void *)old;
      iov[n++].iov_len = (size_t)length;
      iov[n].iov_base = frame->crc;
      iov[n++].iov_len = 4;
      at += (off_t)(24 + length);
    }
    err = write_all(journal_fd, iov, n, batch_at);
  }
  munmap(map, (size_t)map_length);
  *crc_io = crc;
  return err;
}

/* Whether `offsets`/`lengths` are sorted, disjoint, non-empty integer ranges. */
static bool valid_ranges(const double *offsets, const double *lengths, size_t count) {
  for (size_t i = 0; i < count; i++) {
    double o = offsets[i], l = lengths[i];
    if (!(o >= 0 && l > 0 && o + l <= MAX_SAFE_INTEGER && o == (double)(int64_t)o && l == (double)(int64_t)l) ||
        (i > 0 && o < offsets[i - 1] + lengths[i - 1])) {
      return false;
    }
  }
  return true;
}

#define JOURNAL_USAGE "journalRanges(journalFd, at, crc, prefix, fd, offsets, lengths, sync)"

napi_value st_js_journal_ranges(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 8) {
    return throw_type(env, JOURNAL_USAGE);
  }
  int32_t journal_fd, fd;
  double at_d;
  uint32_t crc;
  const uint8_t *prefix;
  size_t prefix_length, count, count2;
  const double *offsets, *lengths;
  bool sync = false;
  if (!get_int(env, argv[0], &journal_fd) || !get_position(env, argv[1], &at_d) || !get_crc(env, argv[2], &crc) ||
      !get_u8(env, argv[3], &prefix, &prefix_length) || !get_int(env, argv[4], &fd) ||
      !get_f64(env, argv[5], &offsets, &count) || !get_f64(env, argv[6], &lengths, &count2) || count != count2 ||
      napi_get_value_bool(env, argv[7], &sync) != napi_ok) {
    return throw_type(env, JOURNAL_USAGE);
  }
  if (!valid_ranges(offsets, lengths, count)) {
    return throw_type(env, "journalRanges: ranges must be sorted, disjoint, non-empty integers");
  }
  int err = write_records(journal_fd, (off_t)at_d, &crc, prefix, prefix_length, fd, offsets, lengths, count);
  if (err) return throw_errno(env, err, "cannot write the edit journal");
  if (sync && fdatasync(journal_fd) != 0) return throw_errno(env, errno, "cannot sync the edit journal");
  return make_crc(env, crc);
}

/* Write `block` repeated (the last copy cut short) over [at, at + length) of `fd`. 0 or an errno. */
static int write_repeated(int fd, const uint8_t *block, size_t block_length, uint64_t at, uint64_t left) {
  /* As many buffers as the copies (at most 1024, what a call takes), in a VLA: the stack below a process's deepest
   * call so far is untouched (a page fault per 4 KiB at first use), and 1024 buffers are 16 KiB. Sizing this, the
   * records' buffers and the journal's header by what they hold took an edit's first native call in a fresh Node
   * process from 67 to 62 minor faults (getrusage; its later calls: 13-16, the old bytes' mapping). */
  uint64_t copies = (left + block_length - 1) / block_length;
  size_t room = copies < 1024 ? (size_t)copies : 1024;
  if (room == 0) return 0;
  struct iovec iov[room];
  while (left > 0) {
    int n = 0;
    uint64_t batch = 0;
    while ((size_t)n < room && left > 0) {
      size_t take = left < block_length ? (size_t)left : block_length;
      iov[n].iov_base = (void *)block;
      iov[n++].iov_len = take;
      left -= take;
      batch += take;
    }
    int err = write_all(fd, iov, n, (off_t)at);
    if (err) return err;
    at += batch;
  }
  return 0;
}

/* fsync the directory holding `file` (its new entry); failures ignored, as fsyncDirectory does. */
static void sync_directory_of(const char *file) {
  char dir[4096];
  const char *slash = strrchr(file, '/');
  size_t n = slash == NULL ? 0 : (size_t)(slash - file);
  if (slash == file) n = 1;
  if (n == 0) {
    dir[0] = '.';
    n = 1;
  } else {
    memcpy(dir, file, n);
  }
  dir[n] = 0;
  int dfd = open(dir, O_RDONLY | O_CLOEXEC);
  if (dfd < 0) return;
  (void)fsync(dfd);
  close(dfd);
}

#define BEGIN_USAGE \
  "journalBegin(journalPath, fileSize, group, nonce, sync, fd, offsets, lengths, writeFd, data, repeat, out)"
/* The header's fixed part (magic, file size, group length) and its end (nonce, CRC). */
#define HEADER_FIXED 24
#define MAX_GROUP_BYTES 4096

/*
 * Create the journal at `path` (O_EXCL), write its header and one record per range (old bytes read from `fd`),
 * fdatasync it and its directory when `sync`. On success `out` gets the journal's fd, its end and the last CRC; on
 * failure nothing is left (the journal is removed: no data was written for it) and the errno is returned.
 */
static int create_journal(const char *path, double file_size, const uint8_t *group, size_t group_length,
                          uint32_t nonce, bool sync, int fd, const double *offsets, const double *lengths, size_t count,
                          uint64_t total, double *out) {
  /* The header: "STJRNL03" · file size · group length · group · nonce · CRC (journal.ts). */
  uint8_t head[HEADER_FIXED + group_length + 8];
  memcpy(head, "STJRNL03", 8);
  put_u64(head + 8, (uint64_t)file_size);
  put_u64(head + 16, group_length);
  memcpy(head + HEADER_FIXED, group, group_length);
  size_t head_length = HEADER_FIXED + group_length;
  for (int b = 0; b < 4; b++) head[head_length++] = (uint8_t)(nonce >> (8 * b));
  uint32_t crc = crc32c(0, head, head_length);
  for (int b = 0; b < 4; b++) head[head_length++] = (uint8_t)(crc >> (8 * b));
  /* Created at its final name, exclusively (an existing journal is another edit's: EEXIST). */
  int journal_fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (journal_fd < 0) return errno;
  int err = write_records(journal_fd, 0, &crc, head, head_length, fd, offsets, lengths, count);
  if (err == 0 && sync && fdatasync(journal_fd) != 0) err = errno;
  if (err) {
    /* Nothing was written to the file for it: the journal goes. */
    close(journal_fd);
    unlink(path);
    return err;
  }
  if (sync) sync_directory_of(path);
  out[0] = journal_fd;
  out[1] = (double)(head_length + total + 24 * (uint64_t)count);
  out[2] = crc;
  return 0;
}

/* The arguments journalBegin and journalFill start with (journalPath, fileSize, group, nonce, sync, fd). */
typedef struct {
  char path[MAX_PATH_BYTES + 1];
  int path_error;
  double file_size;
  const uint8_t *group;
  size_t group_length;
  uint32_t nonce;
  bool sync;
  int32_t fd;
} journal_head;

static bool get_head(napi_env env, const napi_value *argv, journal_head *head) {
  head->sync = false;
  head->path_error = get_path(env, argv[0], head->path);
  return head->path_error != EINVAL && get_position(env, argv[1], &head->file_size) &&
         get_u8(env, argv[2], &head->group, &head->group_length) && get_crc(env, argv[3], &head->nonce) &&
         napi_get_value_bool(env, argv[4], &head->sync) == napi_ok && get_int(env, argv[5], &head->fd);
}

napi_value st_js_journal_begin(napi_env env, napi_callback_info info) {
  size_t argc = 12;
  napi_value argv[12];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 12) {
    return throw_type(env, BEGIN_USAGE);
  }
  journal_head h;
  const uint8_t *data = NULL;
  size_t count, count2, data_length = 0, out_length;
  bool repeat = false;
  int32_t write_fd;
  const double *offsets, *lengths;
  double *out;
  napi_valuetype data_type;
  if (!get_head(env, argv, &h) || !get_f64(env, argv[6], &offsets, &count) ||
      !get_f64(env, argv[7], &lengths, &count2) || count != count2 || !get_int(env, argv[8], &write_fd) ||
      napi_typeof(env, argv[9], &data_type) != napi_ok ||
      (data_type != napi_null && !get_u8(env, argv[9], &data, &data_length)) ||
      napi_get_value_bool(env, argv[10], &repeat) != napi_ok ||
      !get_f64(env, argv[11], (const double **)&out, &out_length) || out_length < 4) {
    return throw_type(env, BEGIN_USAGE);
  }
  if (h.path_error) return throw_errno(env, h.path_error, "cannot create the edit journal");
  if (h.group_length > MAX_GROUP_BYTES) return throw_type(env, "journalBegin: group too long");
  if (!valid_ranges(offsets, lengths, count)) {
    return throw_type(env, "journalBegin: ranges must be sorted, disjoint, non-empty integers");
  }
  uint64_t total = 0;
  for (size_t i = 0; i < count; i++) total += (uint64_t)lengths[i];
  if (data != NULL && (data_length == 0 || (!repeat && data_length != total))) {
    return throw_type(env, "journalBegin: data must hold the ranges' bytes (or a block to repeat)");
  }
  out[0] = -1;
  out[3] = 0;
  int err = create_journal(h.path, h.file_size, h.group, h.group_length, h.nonce, h.sync, h.fd, offsets, lengths,
                           count, total, out);
  if (err) return throw_errno(env, err, "cannot write the edit journal");
  /* The journal holds the old bytes of every range: now the data. */
  if (data != NULL) {
    const uint8_t *from = data;
    for (size_t i = 0; i < count && err == 0; i++) {
      uint64_t at = (uint64_t)offsets[i], length = (uint64_t)lengths[i];
      if (repeat) {
        err = write_repeated(write_fd, data, data_length, at, length);
      } else {
        struct iovec one = {(void *)from, (size_t)length};
        err = write_all(write_fd, &one, 1, (off_t)at);
        from += length;
      }
    }
    if (err) return throw_errno(env, err, "cannot write the edited range");
    out[3] = 1;
  }
  return NULL;
}

/*
 * The zeros a zero fill writes: one page, repeated (256 copies in one pwritev for 1 MiB). Its source stays in the
 * first-level cache while the kernel copies it: writing 1 MiB of zeros this way took 0.050 ms where 16 copies of a
 * 64 KiB block took 0.062 (medians of 11, C program over a cached 1 MiB range of the 2.4 GiB checkpoint).
 */
static const uint8_t zero_page[4096] __attribute__((aligned(4096)));

#define FILL_USAGE "journalFill(journalPath, fileSize, group, nonce, sync, fd, offset, length, block, out)"

/*
 * journalFill: journalBegin for one range whose new bytes are `block` repeated (null: zeros), with plain numbers
 * for the range: an edit's first fill in one call without the arrays journalBegin takes.
 */
napi_value st_js_journal_fill(napi_env env, napi_callback_info info) {
  size_t argc = 10;
  napi_value argv[10];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 10) {
    return throw_type(env, FILL_USAGE);
  }
  journal_head h;
  double offset, length;
  const uint8_t *block = zero_page;
  size_t block_length = sizeof zero_page, out_length;
  double *out;
  napi_valuetype block_type;
  if (!get_head(env, argv, &h) || !get_position(env, argv[6], &offset) || !get_position(env, argv[7], &length) ||
      napi_typeof(env, argv[8], &block_type) != napi_ok ||
      (block_type != napi_null && !get_u8(env, argv[8], &block, &block_length)) ||
      !get_f64(env, argv[9], (const double **)&out, &out_length) || out_length < 4) {
    return throw_type(env, FILL_USAGE);
  }
  if (h.path_error) return throw_errno(env, h.path_error, "cannot create the edit journal");
  if (h.group_length > MAX_GROUP_BYTES) return throw_type(env, "journalFill: group too long");
  if (!valid_ranges(&offset, &length, 1) || block_length == 0) {
    return throw_type(env, "journalFill: the range must be non-empty integers, the block non-empty");
  }
  out[0] = -1;
  out[3] = 0;
  int err = create_journal(h.path, h.file_size, h.group, h.group_length, h.nonce, h.sync, h.fd, &offset, &length, 1,
                           (uint64_t)length, out);
  if (err) return throw_errno(env, err, "cannot write the edit journal");
  /* The journal holds the old bytes: now the data. */
  err = write_repeated(h.fd, block, block_length, (uint64_t)offset, (uint64_t)length);
  if (err) return throw_errno(env, err, "cannot write the edited range");
  out[3] = 1;
  return NULL;
}

/* Called from the addon's init (safetensors_native.c), once per environment (worker threads too). */
void st_journal_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, crc_init);
}

#define REPEATED_USAGE "writeRepeated(fd, block, offset, length)"

napi_value st_js_write_repeated(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4) {
    return throw_type(env, REPEATED_USAGE);
  }
  int32_t fd;
  const uint8_t *block;
  size_t block_length;
  double offset_d, length_d;
  if (!get_int(env, argv[0], &fd) || !get_u8(env, argv[1], &block, &block_length) || block_length == 0 ||
      !get_position(env, argv[2], &offset_d) || !get_position(env, argv[3], &length_d) ||
      offset_d + length_d > MAX_SAFE_INTEGER) {
    return throw_type(env, REPEATED_USAGE);
  }
  int err = write_repeated(fd, block, block_length, (uint64_t)offset_d, (uint64_t)length_d);
  if (err) return throw_errno(env, err, "cannot write the edited range");
  return NULL;
}

#define WRITABLE_USAGE "openWritable(path, dev, ino)"

/*
 * openWritable(path, dev, ino) -> fd: the file opened read-write, refused (ESTALE) unless it is still the file
 * (st_dev, st_ino, as openHead reported them) whose header was validated. The descriptor is the caller's.
 */
napi_value st_js_open_writable(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  char path[MAX_PATH_BYTES + 1];
  double dev, ino;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_value_double(env, argv[1], &dev) != napi_ok || napi_get_value_double(env, argv[2], &ino) != napi_ok) {
    return throw_type(env, WRITABLE_USAGE);
  }
  int path_error = get_path(env, argv[0], path);
  if (path_error == EINVAL) return throw_type(env, WRITABLE_USAGE);
  if (path_error) return throw_errno(env, path_error, "open");
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return throw_errno(env, errno, "open");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, err, "fstat");
  }
  /* Compared as openHead reports them (doubles). */
  if ((double)st.st_dev != dev || (double)st.st_ino != ino) {
    close(fd);
    return throw_errno(env, ESTALE, "the file was replaced while it was opened");
  }
  napi_value result = NULL;
  napi_create_int32(env, fd, &result);
  return result;
}

#define END_USAGE "journalEnd(journalFd, journalPath)"

/*
 * journalEnd(journalFd, journalPath) -> undefined: close the journal and remove it (the commit point of an edit, or
 * the end of a rollback); a journal already gone is no error.
 */
napi_value st_js_journal_end(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  char path[MAX_PATH_BYTES + 1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 || !get_int(env, argv[0], &fd)) {
    return throw_type(env, END_USAGE);
  }
  int path_error = get_path(env, argv[1], path);
  if (path_error == EINVAL) return throw_type(env, END_USAGE);
  if (path_error) return throw_errno(env, path_error, "cannot remove the edit journal");
  if (fd >= 0) close(fd);
  if (unlink(path) != 0 && errno != ENOENT) return throw_errno(env, errno, "cannot remove the edit journal");
  return NULL;
}
