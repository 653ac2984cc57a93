/* Idle pieces given back on the core's thread (heap_trim.c). With cfg.idle_trim_s set, after
 * each sync ahead the core's thread gives the driver back the 2 MiB pieces that have stayed
 * wholly free for that long, a few at a time, while the program goes on. A large request that
 * finds the device's free memory scattered in pieces must otherwise move them to its range, or
 * give them back itself, on the program's thread (~50 us a piece on the H200): done here, the
 * driver time is spent while the program's host thread is busy with other things. */
#ifndef VMM_HEAP_TRIM_H
#define VMM_HEAP_TRIM_H

#include <stdbool.h>

#include "heap_types.h"

/* One round (dh's lock not held; taken per batch): stamp the pieces wholly free now with the
 * time they were first seen so, then give back at most TRIM_ROUND_MAX of those free for
 * cfg.idle_trim_s or more, TRIM_BATCH per hold of the lock. Returns how many went. */
size_t trim_round(struct devheap *dh);

#endif
