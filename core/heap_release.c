/* Giving wholly free handles back (heap_release.h). */
#include "heap_release.h"

#include <stdlib.h>

#include "heap_phys.h"
#include "heap_refill.h"

void heap_release_free_handles(struct devheap *dh, size_t keep_bytes)
{
	size_t free_bytes = 0, n = 0, cap = 0;
	struct phandle **hs = NULL;

	refill_settle(dh);
	phys_retry_parked(dh);
	for (struct phandle *h = dh->handles; h; h = h->next) {
		if (handle_wholly_free(dh, h)) {
			free_bytes += h->size;
			cap++;
		}
	}
	if (free_bytes <= keep_bytes)
		return;
	hs = malloc(cap * sizeof(*hs));
	for (struct phandle *h = dh->handles, *nx; h && free_bytes > keep_bytes; h = nx) {
		nx = h->next;
		if (!handle_wholly_free(dh, h))
			continue;
		if (hs) {
			hs[n++] = h;
			free_bytes -= h->size;
		} else if (handle_drop(dh, h, NULL) == VMM_OK) {
			free_bytes -= h->size;
		}
	}
	if (hs)
		heap_drop_handles(dh, hs, n);
	free(hs);
}
