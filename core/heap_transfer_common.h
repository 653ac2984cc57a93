/* What a sleep and a wake of one device share (heap_offload.c, heap_sleep.c, heap_wake.c,
 * heap_backups.c): which arenas they act on, the order of handles, the sizes of their batches.
 * Nothing outside core/ includes this. */
#ifndef VMM_HEAP_TRANSFER_COMMON_H
#define VMM_HEAP_TRANSFER_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "heap_internal.h"

/* Which arenas an operation acts on: a tag's (NULL: every tag), or, for an undo, exactly those
 * that the last operation changed (marked). */
struct filter {
	const char *tag;
	bool changed_only;
	bool discard;
};

static inline bool arena_selected(const struct arena *a, const struct filter *f)
{
	if (f->changed_only)
		return a->marked;
	return !f->tag || !strcmp(f->tag, a->tag);
}

/* An arena a sleep acts on: selected, and with memory resident (awake, or asleep in part). */
static inline bool arena_sleeps(const struct arena *a, const struct filter *f)
{
	return arena_selected(a, f) && (!a->asleep || a->asleep_in_part);
}

/* qsort order of handles (struct phandle *) by address. */
static inline int compare_handle_va(const void *a, const void *b)
{
	const struct phandle *x = *(struct phandle *const *)a, *y = *(struct phandle *const *)b;

	return x->va < y->va ? -1 : x->va > y->va;
}

/* Handles are brought back in batches so that the copy of one overlaps the creation, mapping and
 * access grant of the next (the driver's cost per byte there is a few percent of the copy's). The
 * first batch is small, so that the copy starts early; later ones grow up to the cap. */
#define WAKE_BATCH_FIRST ((uint64_t)64 << 20)
#define WAKE_BATCH_MAX ((uint64_t)1 << 30)

#endif
