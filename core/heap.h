/* The core allocator: per device, one reserved virtual range carved into allocations, physical
 * memory mapped on demand (whole handles for requests of 32 MiB or more made of new memory, 2 MiB
 * pieces otherwise), freed physical memory reused at any address, small allocations packed. Knows nothing of interposition; the
 * shim and the tests drive it through this API. All functions are thread-safe.
 *
 * Reuse rule (see README "When freed memory is reused"): vmm_free() does not synchronize, it
 * quarantines the block; a quarantined block is handed out again only after a device
 * synchronization (backend->synchronize) that began after the free. A failed synchronization
 * (e.g. during stream capture) leaves the block quarantined and the heap takes fresh memory
 * instead. vmm_free_on_stream() makes the block reusable at once by vmm_malloc_on_stream() on the
 * same stream (stream order protects it) and by everyone else after the next synchronization.
 * When the heap synchronizes (a miss with 256 MiB in quarantine, a same-size block waiting while a
 * large free range would be cut, before new memory is made while 8 MiB or more wait, memory
 * running short) is heap_fit.c's policy. Physical memory
 * comes in 2 MiB pieces for requests below max_handle_bytes, so that free memory moves to
 * wherever a request needs it, before any new memory is created (heap_grow.c). */
#ifndef VMM_HEAP_H
#define VMM_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "stats_fields.h"
#include "vmm_error.h"

#define VMM_TAG_MAX 32          /* bytes, with the terminating NUL */
#define VMM_DEFAULT_TAG "default"
#define VMM_MIN_ALIGN 256       /* as cudaMalloc */

typedef struct vmm_core vmm_core;

typedef struct vmm_config {
	size_t cache_limit;        /* bytes of free physical memory kept for reuse per device; beyond it
	                            * wholly free handles are released. 0 = default (see heap.c). SIZE_MAX = keep all. */
	size_t reserve_bytes;      /* VA reserved per device at first use; 0 = 4 x device memory */
	size_t max_handle_bytes;   /* largest physical handle created; 0 = default (no limit) */
	size_t whole_handle_min;   /* new memory for requests of this size or more (or of
	                            * max_handle_bytes, when smaller) comes in handles of up to
	                            * max_handle_bytes; smaller requests get 2 MiB pieces;
	                            * 0 = default (32 MiB) */
	size_t granule_start_min;  /* requests of this size or more start a granule and own whole
	                            * granules (a retain can then give any of them a handle of its
	                            * own); 0 = default (never: only sizes of whole granules start
	                            * one) */
	size_t edge_cut_min;       /* a freed handle of up to 64 MiB that an allocation of this size
	                            * or more would share with free memory is cut at the
	                            * allocation's edges; for a smaller one, into 2 MiB pieces;
	                            * 0 = default (SIZE_MAX: always pieces) */
	bool aligned_cuts;         /* a freed handle of up to 64 MiB that a smaller allocation would
	                            * share is cut into handles of power-of-two granules, aligned
	                            * within it, with a 2 MiB piece where an allocation's edge falls
	                            * inside a granule (at most ~10 handles, not 32 pieces); below
	                            * edge_cut_min only; false = 2 MiB pieces */
	size_t aligned_cut_max;    /* with aligned_cuts, the largest handle a cut makes (bytes,
	                            * rounded up to whole granules); below 64 MiB a large request
	                            * gives such handles back as it does 2 MiB pieces (heap_grow.c);
	                            * 0 = default (64 MiB) */
	int uncut_scan;            /* a request that would cut a free large handle looks at up to
	                            * this many other fitting blocks for one it cuts nothing in
	                            * (heap_fit.c, uncut_block); 0 = never: it cuts (default 16) */
	bool refill_ahead;         /* a cut makes on the program's thread only the pieces the
	                            * request lies on; a thread of the core makes the free rest
	                            * (heap_refill.h); false = all of them on the program's thread */
	unsigned refill_wait_ms;   /* how long the program's thread waits for the refill thread's
	                            * piece in hand before it leaves that range out; 0 = 2000
	                            * (tests set less) */
	bool give_back_late;       /* a large request that must wait for a device sync gives the
	                            * free pieces its growth takes back only after the sync; false
	                            * = before it, while the GPU still runs the program's queued
	                            * work (heap_grow.h, arena_give_back_early) */
	size_t small_max;          /* allocations up to this size are packed into shared pages; 0 = default */
	size_t sync_ahead_min;     /* a thread synchronizes the device once this many freed bytes
	                            * wait in its quarantine (CUDA only; heap_ahead.h); 0 = never */
	bool sync_whole;           /* an allocation that needs quarantined memory synchronizes the
	                            * whole device at once; false = it first waits for the sync
	                            * ahead in flight, which leaves the work queued after it on the
	                            * GPU (heap_ahead.h, ahead_wait) */
	double slow_log_s;         /* at debug level, a block request that takes this long or
	                            * longer logs what the heap did for it (heap_fit.c, slow_log);
	                            * 0 = default (50 us) */
} vmm_config;

/* The configuration's defaults, filled in. */
void vmm_config_defaults(vmm_config *cfg);

vmm_status vmm_core_create(vmm_backend *be, const vmm_config *cfg, vmm_core **out, vmm_error *err);
/* Unmaps and releases every handle and reservation the core holds. Live allocations die with it.
 * false: one of the core's threads, or a trim, is still in the driver after its bound; the core
 * is then left as it is (and the backend must not be closed under it). */
bool vmm_core_destroy(vmm_core *core);
/* In a forked child (pthread_atfork): the parent's helper threads are not there. */
void vmm_core_after_fork(vmm_core *core);
vmm_backend *vmm_core_backend(vmm_core *core);

/* Allocate `size` bytes (size 0 gets a distinct 256-byte block) aligned to max(align, 256) on dev,
 * under tag (NULL = "default"). VMM_E_OOM when the device has no memory left even after the
 * cache is given back. */
vmm_status vmm_malloc(vmm_core *core, int dev, size_t size, size_t align, const char *tag,
		      vmm_devptr *out, vmm_error *err);
/* Free an allocation by its base address. VMM_E_NOT_OURS (nothing changed) for any other address. */
vmm_status vmm_free(vmm_core *core, vmm_devptr ptr, vmm_error *err);

/* Stream-ordered variants (cuMemAllocAsync / cuMemFreeAsync semantics). vmm_malloc_ordered
 * also says (*reused, when not NULL) whether the block is one freed on `stream` and taken back
 * before a synchronization: its former owner's work on that stream may still be running. */
vmm_status vmm_malloc_on_stream(vmm_core *core, int dev, size_t size, const char *tag,
				vmm_stream stream, vmm_devptr *out, vmm_error *err);
vmm_status vmm_malloc_ordered(vmm_core *core, int dev, size_t size, const char *tag,
			      vmm_stream stream, vmm_devptr *out, bool *reused, vmm_error *err);
vmm_status vmm_free_on_stream(vmm_core *core, vmm_devptr ptr, vmm_stream stream, vmm_error *err);

/* A reset of dev's primary context (cudaDeviceReset): reset(arg) is the driver's, run while no
 * transfer of dev holds its copy engine. Once it returned 0, what the core made in that context
 * and the driver destroyed with it (the copy engine's streams and staging buffers) is forgotten
 * and made again when needed; with free_all every live allocation of dev is freed and the
 * heap's free memory given back (vmm_trim), as the driver frees a context's allocations. The
 * heap's memory itself is the virtual-memory API's and outlives the reset (tests/gpu/PROBE.md
 * (j)). freed (may be NULL) is told each allocation's base as it is freed. Returns reset's
 * result. */
int vmm_device_reset(vmm_core *core, int dev, bool free_all, int (*reset)(void *arg), void *arg,
		     void (*freed)(vmm_devptr base));

/* What the core knows about the allocation containing ptr (any interior address). */
typedef struct vmm_alloc_info {
	vmm_devptr base;
	size_t size;               /* the size asked for */
	size_t usable;             /* the bytes reserved for it (>= size) */
	int device;
	char tag[VMM_TAG_MAX];
} vmm_alloc_info;
bool vmm_lookup(vmm_core *core, vmm_devptr ptr, vmm_alloc_info *info);

/* Give every cached (free) physical handle of dev back to the driver; dev < 0: all devices. The
 * quarantine's device synchronization is made without the heap's lock: the program's own
 * allocations and frees go on meanwhile. */
vmm_status vmm_trim(vmm_core *core, int dev, vmm_error *err);
/* The same, its synchronization (made only when the quarantine needs one) within lim's deadline
 * (vmm_drain): VMM_E_BUSY when the device did not finish its work by then, the quarantine left
 * as it was and what was free given back. */
struct vmm_limits; /* offload/transfer.h */
vmm_status vmm_trim_within(vmm_core *core, int dev, const struct vmm_limits *lim,
			   vmm_error *err);
/* Only the quarantine made reusable (its synchronization within lim, as above), nothing given
 * back: memory the caller means to use itself, which another process could take meanwhile. */
vmm_status vmm_reclaim_within(vmm_core *core, int dev, const struct vmm_limits *lim,
			      vmm_error *err);

/* Peer access: grant (or revoke) `peer` read/write access to every present and future mapping of
 * dev's heap, kept across sleep and wake. */
vmm_status vmm_set_peer_access(vmm_core *core, int dev, int peer, bool enable, vmm_error *err);

/* Statistics: the fields and what each means are in stats_fields.h (VMM_HEAP_STATS). */
typedef struct vmm_stats {
	VMM_HEAP_STATS(VMM_STAT_U64_MEMBER)
} vmm_stats;

/* dev < 0: all devices; tag NULL: all tags. VMM_E_INVALID for an unknown device. */
vmm_status vmm_stats_get(vmm_core *core, int dev, const char *tag, vmm_stats *out, vmm_error *err);
/* Device dev's figures (every tag; zeros for a device without a heap), never behind an
 * allocation's wait for the device: read as that allocation left them while it waits (a view,
 * as vmm_lookup's). For the program's own queries, which the driver answers at once. */
void vmm_stats_now(vmm_core *core, int dev, vmm_stats *out);

/* Reads of the heaps' figures on this thread (vmm_stats_get, vmm_is_asleep, vmm_tags_list,
 * vmm_share_list, vmm_share_asleep_bytes; and vmm_trim's lock) wait until wait_ms from now for a heap's lock held by
 * an allocator waiting for its device (as long as the device's work lasts), and 2 s more for
 * one held otherwise, until vmm_bounded_reads_end; a read that misses its lock leaves that heap
 * out. For the control server, whose answers must not wait for the program's device. */
void vmm_bounded_reads_begin(int wait_ms);
/* Ends them; false when a read left a heap out (the figures read are incomplete). */
bool vmm_bounded_reads_end(void);
/* How long the program's thread has waited for a device inside the allocator with a heap's lock
 * held, in ms: the longest over the devices, 0 when none does now. */
long long vmm_lock_wait_ms(vmm_core *core);
/* Names of the tags that have (or had) memory on dev; returns how many (up to max). */
int vmm_tags_list(vmm_core *core, int dev, char (*names)[VMM_TAG_MAX], int max);
/* Devices the core has a heap on (bitmask of ordinals). */
uint32_t vmm_devices_used(vmm_core *core);

#endif
