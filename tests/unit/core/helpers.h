/* Shared by the core's unit tests: open the CUDA backend over simdev, read the device's physical
 * use, and write/check contents through the host pointer (simdev memory is host memory). */
#ifndef VMM_TEST_CORE_HELPERS_H
#define VMM_TEST_CORE_HELPERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heap.h"
#include "vmm_share.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

struct tctx {
	vmm_backend *be;
	vmm_core *core;
};

/* Set simdev's environment before the backend first loads libcuda.so.1 (NULL: leave unset). */
void t_simdev_env(const char *memory, const char *devices, const char *fail);
/* Open backend and core (cfg may be NULL); fails the test on error. The backend is CUDA, or
 * Ascend when VMM_TEST_BACKEND=acl. */
void t_open(struct tctx *t, const vmm_config *cfg);
/* The same, returning the status instead of failing (for fault injection). */
vmm_status t_try_open(struct tctx *t, const vmm_config *cfg, vmm_error *err);
void t_close(struct tctx *t);
/* Physical bytes in use on dev as the driver reports them (total - free). */
uint64_t t_dev_used(struct tctx *t, int dev);
uint64_t t_dev_total(struct tctx *t, int dev);
vmm_stats t_stats(struct tctx *t, int dev, const char *tag);
/* Sleep every device (discarding or keeping a copy) / wake it; fail the test on error. */
void t_sleep(struct tctx *t, bool discard);
void t_wake(struct tctx *t);
/* Driver handles the heap holds on dev now (created and not yet released). */
uint64_t t_handles_held(struct tctx *t, int dev);
/* Distinct physical handles mapped over [p, p+size) (CUDA backend), asked of the driver granule
 * by granule (a handle over several granules is counted once: adjacent granules of one handle
 * answer the same). */
size_t t_handles_over(vmm_devptr p, size_t size);
/* Whether every granule of [p, p+size) has memory mapped, asked of the driver (CUDA backend);
 * unlike t_handles_over, it does not fail the test, so a child process may ask it. */
bool t_mapped(vmm_devptr p, size_t size);
/* simdev's count of the process's physical device memory (simdev.h): t_dev_peak is the most held
 * at any instant, inside calls too, since t_dev_peak_reset (which the test needs first). */
void t_dev_peak_reset(void);
uint64_t t_dev_peak(void);

/* The text of the log file at path, read whole (up to cap - 1 bytes) into buf and the file
 * removed; fails the test when there is no such file. */
char *t_read_log(const char *path, char *buf, size_t cap);

/* Run scenario() in a child process (simdev reads its environment once per process): env holds
 * "NAME=value" settings for it (NULL-ended, or NULL; SIMDEV_FAIL is unset unless given) and
 * SIMDEV_STATS points at a file of its own. The child exits with what scenario returns (exit,
 * not _exit: simdev writes its stats from a destructor). Returns that code, or 128 + the signal
 * that ended the child; *live: the device bytes simdev still held at its exit (-1: unknown). */
int t_run_child(int (*scenario)(void), const char *const *env, long long *live);

/* Map the export's pieces at a range of their own, as another process would; returns where the
 * allocation lies in that range. *fresh (may be NULL): whether the descriptors were exported for
 * this fetch (false: copies of kept ones). t_import_drop gives the range back. */
vmm_devptr t_import_view(struct tctx *t, const vmm_share_info *want, bool *fresh);
void t_import_drop(struct tctx *t, const vmm_share_info *want, vmm_devptr view);

/* Fill [p, p+n) with a pattern of seed (every word for small ranges, sampled for large ones);
 * t_check answers whether it is still there. */
void t_fill(vmm_devptr p, size_t n, uint64_t seed);
bool t_check(vmm_devptr p, size_t n, uint64_t seed);

/* n pairs of a 4 MiB allocation and a kept 2 MiB one, kept[i] filled with i + 1, then the 4 MiB
 * ones freed (into quarantine): free memory scattered in 4 MiB holes with no larger free range,
 * as a large request finds it after a training step. */
void t_scatter(struct tctx *t, int n, vmm_devptr *kept);

/* Wait until another thread sets *flag, 10 s at most (a thread may start late on a loaded
 * machine: pauses a test makes after this count from that thread's own step); fails the test
 * naming `what` when it never is. */
void t_wait_flag(atomic_bool *flag, const char *what);

#endif
