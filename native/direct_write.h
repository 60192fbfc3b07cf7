/* The direct writes of the safetensors_copy addon (direct_write.c), registered by copy.c. */
#ifndef SAFETENSORS_DIRECT_WRITE_H
#define SAFETENSORS_DIRECT_WRITE_H

#include <node_api.h>
#include <stdint.h>

/* writeDirect(fd, buffers, position). */
napi_value direct_write(napi_env env, napi_callback_info info);
/* copyDirect(fdIn, positionIn, fdOut, positionOut, length). */
napi_value copy_direct(napi_env env, napi_callback_info info);

/* `length` bytes from `from` of `fd` into `into` (pread, EINTR retried): 0, ENODATA when the file ends first, or an
 * errno. */
int read_all(int fd, uint8_t *into, uint64_t length, uint64_t from);
/* `length` bytes of `from` written at `at` of `fd` (pwrite, EINTR retried): 0 or an errno. */
int write_all(int fd, const uint8_t *from, uint64_t length, uint64_t at);

/* The two ways a large write reaches a file: straight to the device (O_DIRECT) or through the page cache. */
enum { WAY_DIRECT = 0, WAY_BUFFERED = 1 };
/* The way the next large write should take: the one that cost less lately (direct_write.c says how it is measured). */
int write_way_choose(void);
/* What a write of `bytes` taken `way` cost, in nanoseconds from its start to its end. */
void write_way_record(int way, uint64_t ns, uint64_t bytes);
/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t write_way_now(void);

#endif
