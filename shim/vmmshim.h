/* vmmshim's in-process API, for programs that want to cooperate with the shim: name the memory
 * their threads allocate (tags), put a tag to sleep and wake it, read statistics.
 *
 * The functions live in libvmmshim.so (installed with this header; pkg-config module vmmshim).
 * Two ways to reach them:
 *  - preloaded (LD_PRELOAD=libvmmshim.so, or `vmmctl run -- program`): find them with
 *    dlsym(RTLD_DEFAULT, "vmmshim_sleep"), so that the program also runs without the shim; only
 *    this header is needed (`pkg-config --cflags vmmshim`). Python: the vmmshim package.
 *  - linked (`pkg-config --cflags --libs vmmshim`): libvmmshim.so becomes a dependency that the
 *    dynamic loader loads with the program, so the program always runs under the shim, without
 *    LD_PRELOAD. List it before any CUDA library on the link line: symbols are looked up in
 *    link order, and a -lcuda listed first would be called directly, past the shim.
 *
 * Every function returns VMMSHIM_OK (0) or an error number; vmmshim_last_error() gives the calling
 * thread's message for the last failure. Nothing here aborts or exits.
 *
 * In-process sleeps do not hold the program's device work: the caller promises not to touch the
 * memory of a sleeping tag until it wakes it (vmmctl sleeps, from outside, do hold it). */
#ifndef VMMSHIM_H
#define VMMSHIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMMSHIM_API __attribute__((visibility("default")))

#define VMMSHIM_TAG_MAX 32            /* bytes with the terminating NUL */

enum vmmshim_result {
	VMMSHIM_OK = 0,
	VMMSHIM_E_INVALID = 1,        /* bad argument, or no device memory managed yet */
	VMMSHIM_E_OOM = 2,            /* wake: not enough device memory (still asleep) */
	VMMSHIM_E_HOST_OOM = 3,       /* sleep: no host memory for the copy (nothing changed) */
	VMMSHIM_E_NOT_OURS = 4,
	VMMSHIM_E_DRIVER = 5,
	VMMSHIM_E_ALREADY = 6,        /* already asleep / awake: nothing changed */
	VMMSHIM_E_BUSY = 7,           /* device calls did not drain in time, another sleep or wake
	                               * ran past VMMSHIM_OP_WAIT, or exiting */
	VMMSHIM_E_UNSUPPORTED = 8,
};

/* Statistics, in bytes unless said otherwise. A flat struct of uint64_t (easy with ctypes). */
typedef struct vmmshim_stats_t {
	uint64_t live_bytes;          /* sizes asked for by live allocations */
	uint64_t live_count;
	uint64_t mapped_bytes;        /* physical memory mapped (live + cached) */
	uint64_t cached_bytes;        /* mapped but free, kept for reuse */
	uint64_t reserved_bytes;      /* virtual address space reserved */
	uint64_t asleep_bytes;        /* released by sleep, re-created at wake */
	uint64_t host_backup_bytes;   /* host memory holding sleeping contents */
	uint64_t peak_live_bytes;
	uint64_t alloc_calls;
	uint64_t free_calls;
} vmmshim_stats_t;

/* The tag of the calling thread's next allocations (NULL or "" = "default"). A tag has 1 to 31
 * printable ASCII bytes; it is copied. */
VMMSHIM_API int vmmshim_set_tag(const char *tag);
/* The calling thread's tag ("default" when none was set). */
VMMSHIM_API const char *vmmshim_get_tag(void);

/* Sleep every allocation of tag (NULL = every tag and the program's own VMM mappings) on every
 * device: contents are copied to host memory, or dropped when discard is non-zero; the physical
 * memory is given back while every address stays reserved. */
VMMSHIM_API int vmmshim_sleep(const char *tag, int discard);
/* Wake tag (NULL = everything): memory re-created at the same addresses, contents copied back. */
VMMSHIM_API int vmmshim_wake(const char *tag);
/* The same, for one device (-1 = every device). */
VMMSHIM_API int vmmshim_sleep_device(const char *tag, int device, int discard);
VMMSHIM_API int vmmshim_wake_device(const char *tag, int device);

/* Statistics of tag (NULL = all) on device (-1 = all); out is filled with zeros first. */
VMMSHIM_API int vmmshim_stats(const char *tag, int device, vmmshim_stats_t *out);

/* Progress of a sleep or wake: the in-process ones and those vmmctl asks for. */
enum vmmshim_phase {
	VMMSHIM_PHASE_NONE = 0,       /* no sleep or wake in progress */
	VMMSHIM_PHASE_PREPARING = 1,  /* draining devices, allocating or re-creating memory */
	VMMSHIM_PHASE_COPYING = 2,    /* contents move between device and host */
	VMMSHIM_PHASE_ROLLING_BACK = 3, /* it failed or was cancelled and is being undone */
	VMMSHIM_PHASE_DONE = 4,       /* it ended (the callback's last call) */
};

typedef struct vmmshim_progress_t {
	uint64_t bytes_done;          /* handed to the copy streams so far */
	uint64_t bytes_total;         /* to copy: an estimate until the copies start; >= bytes_done */
	double seconds;               /* since the operation began */
	double gbps;                  /* copy rate so far, 10^9 bytes per second (0 before copying) */
	int sleeping;                 /* 1: a sleep, 0: a wake */
	int phase;                    /* enum vmmshim_phase */
} vmmshim_progress_t;

/* Called on begin, at most every interval_s seconds while bytes move, on each phase change and
 * once at the end (phase VMMSHIM_PHASE_DONE; bytes_total is then what was copied). It runs on the
 * thread doing the sleep or wake, in the middle of it: return quickly, and call no vmmshim
 * function and no device function from it (setting the callback from inside it is refused with
 * VMMSHIM_E_BUSY). fn NULL removes it. Once this returns, the previous callback is not running
 * and will not be called again, so its arg may be freed. */
typedef void (*vmmshim_progress_fn)(const vmmshim_progress_t *progress, void *arg);
VMMSHIM_API int vmmshim_set_progress_callback(vmmshim_progress_fn fn, void *arg, double interval_s);
/* The sleep or wake in progress, from any thread; phase VMMSHIM_PHASE_NONE when none runs. */
VMMSHIM_API int vmmshim_get_progress(vmmshim_progress_t *out);

/* The calling thread's message for its last failed call ("" when none). */
VMMSHIM_API const char *vmmshim_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
