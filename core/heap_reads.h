/* Reads of a heap's figures that wait for its lock only as long as the caller allows
 * (heap.h: vmm_bounded_reads_begin). */
#ifndef VMM_HEAP_READS_H
#define VMM_HEAP_READS_H

#include <stdbool.h>

#include "heap_types.h"

/* dh's lock for a read of its figures: at once outside bounded reads; within them, until their
 * deadline (false then, and the reads are marked incomplete). */
bool heap_lock_read(struct devheap *dh);

/* The program's thread waits for the device while holding dh's lock (heap_reclaim,
 * ahead_wait), since t0_s (vmm_now_s, which the caller has read already): for
 * vmm_lock_wait_ms, and for views. It changes nothing in the heap in between; the end waits for
 * the views taken meanwhile. */
void heap_lock_wait_begin(struct devheap *dh, double t0_s);
void heap_lock_wait_end(struct devheap *dh);

/* A read of dh that must be answered, however long the lock is held (a pointer query: the
 * driver's own answers never wait for the device): dh's lock, or, while its holder waits for the
 * device, a view of the heap as that thread left it, without the lock. Read only, and briefly. */
enum heap_view { HEAP_VIEW_LOCKED, HEAP_VIEW_BORROWED };
enum heap_view heap_view_begin(struct devheap *dh);
void heap_view_end(struct devheap *dh, enum heap_view how);

#endif
