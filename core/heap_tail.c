/* A sleep releases its handles in batches, each while the next one copies out (heap_sleep.c),
 * but the last one's release comes after every copy has ended and adds to the sleep's time. On
 * the H200 releasing a 1 GiB handle takes 0.7-1.2 ms (VMMSHIM_LOG=debug's sleep phases), ~5% of a
 * 1 GiB sleep at the link's 55 GB/s, and a program's largest allocations are often one handle
 * each. So after a sleep (of at most TAIL_SLEEP_MAX), a large asleep handle is cut in two: the
 * wake re-creates the large part and its tail as two handles (the tail's creation runs under the
 * large part's copy), and the next sleep releases the large part while the tail (an eighth, at
 * least 32 MiB: ~0.6 ms of copy) copies out, leaving only the tail's release (~0.1 ms) after the
 * last copy. Both stay inside the allocations the handle held, so the layout's rules hold
 * (heap_grow.c); the next sleep may join them again (heap_coalesce.c), and this cuts them again,
 * in records only. */
#include "heap_tail.h"

#include <stdlib.h>

#include "heap_blocks.h"
#include "heap_phys.h"

size_t tail_bytes(const struct devheap *dh, size_t size)
{
	size_t tail = size / 8;

	if (size < TAIL_SPLIT_MIN)
		return 0;
	if (tail < ((size_t)32 << 20))
		tail = (size_t)32 << 20;
	if (tail > ((size_t)256 << 20))
		tail = (size_t)256 << 20;
	tail -= tail % dh->gran;
	return tail && tail < size ? tail : 0;
}

bool tail_split_asleep(struct devheap *dh, struct phandle *h)
{
	size_t tail = tail_bytes(dh, h->size);
	struct phandle *t;

	if (!tail || !h->asleep || !h->has_backup || !h->backup.ptr ||
	    h->backup.size != h->size || h->shared || h->retained || h->release_ok)
		return false;
	t = calloc(1, sizeof(*t));
	if (!t)
		return false;
	h->size -= tail;
	h->backup.size = h->size;
	*t = (struct phandle){
		.size = tail,
		.va = h->va + h->size,
		.arena = h->arena,
		.asleep = true,
		.has_backup = true,
		.backup = { .ptr = (char *)h->backup.ptr + h->size, .size = tail,
			    .pinned = h->backup.pinned },
	};
	handle_link(dh, t);
	page_handle_set(dh, t->va, t->size, t);
	return true;
}
