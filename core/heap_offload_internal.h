/* What the files of the heap's sleep and wake share, and nothing outside them includes:
 * heap_offload.c (the selection, the transfer across devices, the public calls) over
 * heap_sleep.c (one device's sleep), heap_wake.c (one device's wake, and the restore a failed
 * sleep also uses) and heap_backups.c (host backups, the copy ranges, the copy engine). */
#ifndef VMM_HEAP_OFFLOAD_INTERNAL_H
#define VMM_HEAP_OFFLOAD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "heap_coalesce.h"
#include "heap_internal.h"
#include "offload/transfer.h"

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

/* One device, its lock held (heap_sleep.c, heap_wake.c): sleep or wake its selected arenas, within
 * the limits; the wake is all or nothing, the sleep rolls back or leaves the partial state. */
vmm_status heap_sleep_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			     vmm_transfer_result *res, vmm_error *err);
vmm_status heap_wake_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			    vmm_transfer_result *res, vmm_error *err);
/* Does the device have the memory to wake what is selected? VMM_E_OOM when not. */
vmm_status heap_wake_fits(struct devheap *dh, const struct filter *f, vmm_error *err);
/* Re-create, map, grant and (unless no_copy) fill the released handles hs[0..n), adding the bytes
 * copied and the copy's time to *res; on failure they are released again, their host copies
 * untouched. */
vmm_status heap_restore_handles(struct devheap *dh, struct phandle **hs, size_t n, bool no_copy,
				vmm_transfer_result *res, vmm_error *err);

/* heap_backups.c. The live ranges of h with their places in its backup, appended to *r. */
vmm_status heap_live_ranges(struct devheap *dh, struct phandle *h, vmm_copy_range **r,
			    size_t *n, size_t *cap, vmm_error *err);
/* h's own backup from the device's pool. */
vmm_status heap_backup_for(struct devheap *dh, struct phandle *h, int provision_now,
			   vmm_error *err);
/* One backup piece per run of handles that a sleep will make one (heap_coalesce.h). */
vmm_status heap_run_backups(struct devheap *dh, struct phandle **hs,
			    const struct handle_run *runs, size_t nruns, int provision_now,
			    vmm_error *err);
/* The device's copy engine, made at first use. */
vmm_status heap_copy_engine(struct devheap *dh, vmm_error *err);
/* Backups for the selected resident handles of one device, provisioned now. */
vmm_status heap_provision_backups(struct devheap *dh, const struct filter *f, vmm_error *err);

#endif
