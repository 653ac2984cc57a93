/* Block services of an arena (heap_fit.c): a block for a large allocation or a slot for a small
 * one, found in the arena's free memory, else after a device sync reclaims the quarantine, else
 * by growing; when the driver is out of memory, the ladder (reclaim, empty slabs, retry). Calls
 * the growth, record, slab, handle and block layers. */
#ifndef VMM_HEAP_FIT_H
#define VMM_HEAP_FIT_H

#include "heap_types.h"

/* A used block of `size` bytes (a multiple of HEAP_ALIGN) aligned to align (<= granularity). */
struct blk *arena_alloc_block(struct arena *a, size_t size, size_t align, vmm_error *err);
/* A slot of the small class of rec->size for rec. */
vmm_status arena_alloc_small(struct arena *a, size_t size, struct alloc *rec, vmm_error *err);
/* Device sync, the quarantine becomes free memory; then beyond the cache limit wholly free
 * handles go back to the driver. */
vmm_status heap_reclaim_capped(struct devheap *dh, struct arena *who, vmm_error *err);

#endif
