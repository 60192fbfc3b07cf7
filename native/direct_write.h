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

/* `length` bytes of `from` written at `at` the way that cost less lately (direct_write.c says how that is measured):
 * through `direct_fd` (O_DIRECT) or `buffered_fd` (the page cache). 0 or an errno. */
int write_cheaper(int direct_fd, int buffered_fd, const uint8_t *from, uint64_t length, uint64_t at);

#endif
