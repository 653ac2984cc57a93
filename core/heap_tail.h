/* A large handle's tail, a handle of its own after a sleep (heap_tail.c), so that the next sleep
 * hides the release of the large part under the copy of the tail. */
#ifndef VMM_HEAP_TAIL_H
#define VMM_HEAP_TAIL_H

#include "heap_types.h"

/* Handles of at least this size get a tail of their own. */
#define TAIL_SPLIT_MIN ((size_t)256 << 20)
/* ... after a sleep of at most this many bytes on the device. Above it one release is under
 * 0.1% of the sleep, and the tail was not measured against whole handles there: on the H200 a
 * 64 GiB sleep of tailed 1 GiB allocations copied at 0.94x pinned in the one call made, while
 * 16 GiB ran at 0.99x beside it and whole handles had run 64 GiB at 0.99x in earlier calls. */
#define TAIL_SLEEP_MAX ((uint64_t)16 << 30)

/* How large the tail of an asleep handle of `size` bytes is made: an eighth of it, in whole
 * granules, between 32 and 256 MiB; 0 where the handle stays whole. */
size_t tail_bytes(const struct devheap *dh, size_t size);

/* h is asleep with its host copy (one piece): its last tail_bytes() become an asleep handle of
 * their own, with the matching slice of the copy; the wake re-creates two. Not for a handle that
 * is shared, retained or released by a group (its handle value or its mappings must stay whole).
 * Returns whether h was split (false also when out of host memory: nothing changes then). */
bool tail_split_asleep(struct devheap *dh, struct phandle *h);

#endif
