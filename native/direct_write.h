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

/* The two ways of a large write: straight to the device (O_DIRECT) or through the page cache. */
enum { WRITE_DIRECT = 0, WRITE_BUFFERED = 1 };
/* The way the next large write should go: the one that cost less lately, now and then the other (direct_write.c). */
int write_way_next(void);
/* What a write of `bytes` the way `way` cost, in ns (a monotonic clock's, write_way_clock): it feeds write_way_next. */
void write_way_cost(int way, uint64_t ns, uint64_t bytes);
uint64_t write_way_clock(void);

#endif
