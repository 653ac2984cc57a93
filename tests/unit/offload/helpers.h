/* Helpers for the offload tests: the CUDA backend on simdev, device memory made with the backend
 * (reserve, create, map, grant), and plain synchronous fills and reads to set up and check it. */
#ifndef OFFLOAD_TEST_HELPERS_H
#define OFFLOAD_TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

struct tdev {
	vmm_backend *be;
	vmm_stream s;        /* a stream of the test's own, for setup copies */
};

struct tmem {
	vmm_devptr va;
	size_t size;
	vmm_phys h;
};

/* Set before the first driver call of the test (simdev reads them once). */
void t_simdev_env(const char *memory, const char *devices, const char *fail);
void t_dev_open(struct tdev *t);
void t_dev_close(struct tdev *t);
/* One handle of `size` bytes (rounded up to the granularity) mapped and granted to dev. */
struct tmem t_mem_alloc(struct tdev *t, int dev, size_t size);
void t_mem_free(struct tdev *t, struct tmem *m);
/* Synchronous device writes and reads through the test's own stream. */
void t_write(struct tdev *t, vmm_devptr dst, const void *src, size_t n);
void t_read(struct tdev *t, void *dst, vmm_devptr src, size_t n);
void t_fill(struct tdev *t, vmm_devptr dst, int byte, size_t n);
/* Deterministic pseudo-random bytes. */
void t_pattern(void *p, size_t n, uint64_t seed);
uint64_t t_dev_used(struct tdev *t, int dev);

#endif
