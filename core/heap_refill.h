/* Refilling ahead (heap_refill.c): when a request cuts a large free handle into 2 MiB pieces
 * (handle_shatter), the program's thread makes only the pieces the request lies on; the free
 * rest of the handle's range is made again by a thread of the core while the program is
 * outside the heap.
 * On the H200 the driver runs that thread's calls beside the program's launches: 2000 pieces
 * given back and made again on a second thread cost a program that launched every 15 us 1.1 ms
 * against 178 ms of calls (tests/gpu/probe_overlap.cu). Until it is made, the rest is free
 * memory to the fit but memory the device does not hold: a request placed on it makes it first
 * (refill_claim), so the layout is the one the heap would have made itself, and anything that
 * makes new memory, moves free memory or counts on what is mapped first settles the refills
 * (refill_settle), so the device's memory is never more than it would have been. */
#ifndef VMM_HEAP_REFILL_H
#define VMM_HEAP_REFILL_H

#include <stdbool.h>

#include "heap_types.h"

/* [va, va+size) of arena a (dh's lock held) is claimed address space without memory, granules
 * whole: queue it to be made free pieces on the core's thread, and make it free memory of a
 * until then. false when it is not queued (cfg.refill_ahead off, no thread, a full queue, a
 * capture in progress); the caller then makes the pieces itself. */
bool refill_defer(struct arena *a, vmm_devptr va, size_t size);

/* Before a request is placed on [lo, hi) (dh's lock held): the granules of queued ranges it
 * lies on are made here (the rest stays queued); the range being made, if it lies on it, is
 * stopped after its piece in hand and queued again for the rest. VMM_OK: all of [lo, hi) is
 * backed and the free blocks are as they were; else some range was not made and left the free
 * memory (VMM_E_BUSY: the thread's piece took past the deadline), which may have split the
 * block the caller found, and the caller looks again. */
vmm_status refill_claim(struct devheap *dh, vmm_devptr lo, vmm_devptr hi);

/* dh's lock held: the queued refills are dropped (taken out of the free memory, their address
 * space given back: the growth that follows makes what it needs), and the range being made is
 * stopped after its piece in hand, waited for (2 s at most) and backed as far as it was made.
 * After it no memory of the heap is being made elsewhere. */
void refill_settle(struct devheap *dh);

/* Stop the refill thread (before the core is freed; every heap settled first): false when it
 * did not stop within 5 s, and then the core must not be freed. */
bool refill_stop(struct vmm_core *core);

/* In a forked child: the parent's thread is not there; the ranges it had queued, or was
 * making, leave the free memory (nothing will make them). */
void refill_after_fork(struct vmm_core *core);

#endif
