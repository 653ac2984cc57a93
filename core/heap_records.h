/* Allocation records of a device heap (heap_records.c): what free() and lookup() find by base
 * address, the per-arena quarantine of freed allocations, its reclaim after a device
 * synchronization, and the live bytes' accounting. Calls the slab and block layers. */
#ifndef VMM_HEAP_RECORDS_H
#define VMM_HEAP_RECORDS_H

#include "heap_types.h"

struct alloc *alloc_new(struct devheap *dh);
void alloc_put(struct devheap *dh, struct alloc *r);
vmm_status records_init(struct devheap *dh);
/* Teardown: free every record (live, quarantined, pooled) and the index. */
void records_free_all(struct devheap *dh);

/* The index of live allocations by base address. */
void record_insert(struct devheap *dh, struct alloc *r);
struct alloc *record_remove(struct devheap *dh, vmm_devptr base);

void account_alloc(struct arena *a, struct alloc *r);
void account_free(struct arena *a, struct alloc *r);

/* A freed allocation waits in its arena's quarantine (on_stream: freed on `stream`, reusable at
 * once there); quarantine_take hands one back out before its quarantine is over. */
void quarantine_put(struct alloc *r, bool on_stream, vmm_stream stream);
void quarantine_take(struct alloc *r);
/* Synchronize the device, then every quarantined allocation becomes free memory (who, if any, is
 * counted as having made the sync). No synchronization when the backend counts submissions and
 * none was made since the last one began (counted as skipped). A failed sync changes nothing
 * but that: the next reclaim synchronizes. */
vmm_status heap_reclaim(struct devheap *dh, struct arena *who, vmm_error *err);
/* Would heap_reclaim make the quarantine reusable without a synchronization (something waits
 * there and no work was submitted since the last one began)? Then it costs no more than a
 * lookup, and the heap takes it before it grows. */
bool heap_reclaim_free(struct devheap *dh);
/* Has all the device's work ended already: nothing submitted since a synchronization that
 * completed began (as for heap_reclaim's skip)? *now: the count read (0 where the backend does
 * not count), for heap_synced_upto after a synchronization begun after this read. */
bool heap_device_idle(struct devheap *dh, uint64_t *now);
/* The quarantine becomes free memory. Only right after a successful device sync made with the
 * heap's lock held since before (so that it began after every free in the quarantine). */
void heap_reclaim_synced(struct devheap *dh);
/* After a successful sync that began after the free numbered seq (devheap.quar_seq) and after
 * the backend's submission count `before` was read (on any thread; heap_ahead.c's too): the
 * allocations quarantined up to seq become free memory, and `before` the last synced count when
 * it is newer than the one there. */
void heap_synced_upto(struct devheap *dh, uint64_t seq, uint64_t before);

#endif
