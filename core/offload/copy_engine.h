/* Moves device ranges to host backup memory and back at link speed: chunked, on several streams,
 * with host memory that is pinned once and reused across sleep/wake cycles. Used by the heap's
 * sleep/wake (core/heap_sleep.c, heap_wake.c) and by the program's own VMM handles
 * (app_offload.c). */
#ifndef VMM_COPY_ENGINE_H
#define VMM_COPY_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../stats_fields.h"
#include "../vmm_error.h"

/* A host backup: page-aligned host memory, registered (pinned) with the backend where possible.
 * Allocated once per sleeping range and kept for the next cycle unless freed. A buffer that is not
 * provisioned at allocation is touched and pinned piecewise by the first copy that uses it (the
 * engine finds it from any address inside it); `pinned` then still says 0, although the copies
 * run pinned: read vmm_host_buf_pinned_bytes for the truth. */
typedef struct vmm_host_buf {
	void *ptr;
	size_t size;
	int pinned;        /* registered with the backend (DMA straight into it) */
} vmm_host_buf;

typedef struct vmm_copy_engine vmm_copy_engine;

typedef struct vmm_copy_range {
	vmm_devptr dev;    /* device address */
	void *host;        /* host address (inside a vmm_host_buf) */
	size_t size;
} vmm_copy_range;

/* The fields and what each means are in stats_fields.h (VMM_COPY_STATS). */
typedef struct vmm_copy_stats {
	VMM_COPY_STATS(VMM_STAT_TYPED_MEMBER)
} vmm_copy_stats;

vmm_status vmm_copy_engine_create(vmm_backend *be, int dev, vmm_copy_engine **out, vmm_error *err);
void vmm_copy_engine_destroy(vmm_copy_engine *ce);
/* Optional, before the first copy (VMM_E_BUSY after): chunk size in bytes (default 64 MiB) and
 * number of streams (default 4, at most 8); 0 keeps the default. */
vmm_status vmm_copy_engine_tune(vmm_copy_engine *ce, size_t chunk_bytes, int streams,
				vmm_error *err);

/* Allocate a host buffer of size bytes. Fails with VMM_E_HOST_OOM before touching anything when
 * the host cannot hold it (checked against vmm_host_available_bytes, less 64 MiB of headroom). Provisioning (first touch, pinning) is
 * deferred to the first copy, where it overlaps with the transfer, unless `provision_now`. */
vmm_status vmm_host_buf_alloc(vmm_backend *be, size_t size, int provision_now, vmm_host_buf *out,
			      vmm_error *err);
void vmm_host_buf_free(vmm_backend *be, vmm_host_buf *buf);
/* Touch and pin the segments under buf now (buf may be a piece of a larger buffer); sets
 * buf->pinned when all of it is pinned. */
void vmm_host_buf_provision(vmm_host_buf *buf);
/* A reset of a context ended registrations made in it (the H100: unregistering them afterwards
 * fails, and copies into them run at pageable speed). Every pinned segment of be's buffers is
 * unregistered where it still is, and provisioned again by its next copy (contents kept). Call
 * with no copy running. Returns how many segments it took back. */
size_t vmm_host_buf_pins_lost(vmm_backend *be);
/* Bytes of buf that are registered with the backend now. */
size_t vmm_host_buf_pinned_bytes(const vmm_host_buf *buf);
/* Host backups are pinned in segments of this many bytes (default 1 GiB: the driver's cost is per
 * registration call). Affects buffers allocated afterwards. VMM_E_INVALID unless a multiple of 2 MiB. */
vmm_status vmm_host_buf_set_segment_bytes(size_t bytes, vmm_error *err);
/* Host bytes that could be had now: MemAvailable, or less where this process's cgroup limits
 * memory. */
uint64_t vmm_host_available_bytes(void);

/* Copy every range device -> host (out) or host -> device (in); returns when all are complete. */
vmm_status vmm_copy_out(vmm_copy_engine *ce, const vmm_copy_range *ranges, size_t n,
			vmm_copy_stats *stats, vmm_error *err);
vmm_status vmm_copy_in(vmm_copy_engine *ce, const vmm_copy_range *ranges, size_t n,
		       vmm_copy_stats *stats, vmm_error *err);

/* The same in steps, for a caller that makes ranges ready while earlier ones copy (a wake
 * creating and mapping memory ahead of its copy): vmm_copy_begin takes the engine for this
 * thread, each vmm_copy_add issues its ranges and returns without waiting for them, and
 * vmm_copy_end (due after every successful begin, also after a failure) waits for everything
 * issued and returns the first failure. Host memory of an added range must stay until the end. */
vmm_status vmm_copy_begin(vmm_copy_engine *ce, int to_device, vmm_error *err);
vmm_status vmm_copy_add(vmm_copy_engine *ce, const vmm_copy_range *ranges, size_t n,
			vmm_error *err);
vmm_status vmm_copy_end(vmm_copy_engine *ce, vmm_copy_stats *stats, vmm_error *err);
/* After a failed transfer: true when its streams could not be synchronized (a synchronize failed
 * at every attempt), so copies may still be reading or writing its device and host memory. The
 * caller must then leave that memory mapped and allocated. False again after a transfer whose
 * streams all synchronize. */
bool vmm_copy_engine_unsettled(vmm_copy_engine *ce);
/* An unsettled engine's streams synchronized once more: true when they all are idle now (the
 * engine is settled again), false when still not, or when a transfer holds the engine. */
bool vmm_copy_engine_settle(vmm_copy_engine *ce);
/* Run reset(arg), a reset of the device's primary context, while no transfer holds the engine;
 * when it returns 0 the engine's streams and pinned staging buffers, made in that context and
 * destroyed with it, are forgotten (not destroyed again) and made anew by the next transfer.
 * Returns reset's result. */
int vmm_copy_engine_reset(vmm_copy_engine *ce, int (*reset)(void *arg), void *arg);

#endif
