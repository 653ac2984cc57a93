/* Syncing ahead (heap_ahead.c): once enough freed memory waits in a device's quarantine, a
 * thread of the core synchronizes the device while the program goes on, and the memory freed
 * before that synchronization began becomes free. The program's own thread then seldom has to
 * synchronize at an allocation (each such wait drains the GPU's queue and leaves the GPU idle
 * while the program refills it). */
#ifndef VMM_HEAP_AHEAD_H
#define VMM_HEAP_AHEAD_H

#include <stdbool.h>

#include "heap_types.h"

/* After a free (dh's lock held): post a sync ahead when the quarantine holds
 * cfg.sync_ahead_min bytes or more, none is in flight for dh, and the backend counts
 * submissions. Starts the core's thread at the first post. */
void ahead_kick(struct devheap *dh);

/* Before the program's thread synchronizes the device to reuse quarantined memory (dh's lock
 * held): wait for the sync ahead in flight instead, and reclaim what it covers (the memory freed
 * before it was posted). That sync waits only for the work queued before it, so the work queued
 * since stays on the GPU while the program's thread goes on: its own sync would drain it all,
 * and whatever the host does next (e.g. giving pieces back to the driver, ~35 us each on the
 * H200) would then run with the GPU idle. true: reclaimed; false: none in flight, the one in
 * flight was waited for already or has not begun (the thread serves another device first), it
 * failed (a capture) or took 10 s, or cfg.sync_whole; the caller then synchronizes itself.
 * dh's lock stays held (the thread says it is done before it takes the lock). */
bool ahead_wait(struct devheap *dh);

/* Stop the core's thread (before the core is freed): false when it did not stop within 5 s
 * (it is waiting for the device), and then the core must not be freed. */
bool ahead_stop(struct vmm_core *core);

/* In a forked child: the parent's thread is not there; nothing is in flight. */
void ahead_after_fork(struct vmm_core *core);

#endif
