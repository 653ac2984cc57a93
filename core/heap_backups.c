/* Host backups of the heap's handles (heap_backups.h): each handle's piece from its
 * device's pool (kept and reused across cycles), one piece per run of handles that a sleep makes
 * one, the ranges copied between a handle and its backup, the device's copy engine, and backups
 * provisioned ahead of a sleep. */
#include "heap_backups.h"

#include <stdlib.h>

#include "heap_coalesce.h"
#include "offload/backup_pool.h"

/* The ranges of h that hold live data (used blocks and slabs; in a shared handle also retired
 * blocks, which an importer may still map), merged, appended to *r. */
vmm_status heap_live_ranges(struct devheap *dh, struct phandle *h, vmm_copy_range **r,
			    size_t *n, size_t *cap, vmm_error *err)
{
	vmm_devptr end = h->va + h->size;
	size_t first = *n;

	for (struct blk *b = blk_containing(dh, h->va); b && b->addr < end; b = b->next) {
		vmm_devptr lo, hi;

		if (b->state != BLK_USED && b->state != BLK_SLAB &&
		    !(h->shared && b->state == BLK_RETIRED))
			continue;
		lo = b->addr > h->va ? b->addr : h->va;
		hi = b->addr + b->size < end ? b->addr + b->size : end;
		if (*n > first && (*r)[*n - 1].dev + (*r)[*n - 1].size == lo) {
			(*r)[*n - 1].size += hi - lo;
			continue;
		}
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 64;
			vmm_copy_range *nr = realloc(*r, c * sizeof(*nr));

			if (!nr)
				return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for ranges");
			*r = nr;
			*cap = c;
		}
		(*r)[*n].dev = lo;
		(*r)[*n].host = (char *)h->backup.ptr + (lo - h->va);
		(*r)[(*n)++].size = hi - lo;
	}
	return VMM_OK;
}

/* A host backup of size bytes from the device's pool (the pool made at the first). */
static vmm_status backup_get(struct devheap *dh, size_t size, int provision_now, vmm_host_buf *out,
			     vmm_error *err)
{
	if (!dh->backups) {
		dh->backups = vmm_backup_pool_create(dh->core->be);
		if (!dh->backups)
			return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a backup pool");
		dh->backup_put = vmm_backup_put;
		dh->backups_destroy = vmm_backup_pool_destroy;
	}
	return vmm_backup_get(dh->backups, size, provision_now, out, err);
}

vmm_status heap_backup_for(struct devheap *dh, struct phandle *h, int provision_now,
			   vmm_error *err)
{
	return backup_get(dh, h->size, provision_now, &h->backup, err);
}

/* Each run that will become one handle after the sleep (heap_coalesce.h) is backed by one piece,
 * its handles by slices of it in address order. The old pieces go back after the new one is had
 * (a pool chunk emptied first would be mapped and pinned again); where the host cannot hold
 * both, they go back first. */
vmm_status heap_run_backups(struct devheap *dh, struct phandle **hs,
			    const struct handle_run *runs, size_t nruns, int provision_now,
			    vmm_error *err)
{
	for (size_t i = 0; i < nruns; i++) {
		const struct handle_run *r = &runs[i];
		vmm_host_buf piece;
		bool put = false;
		vmm_status st;

		if (run_backup_contiguous(hs, r))
			continue;
		st = backup_get(dh, r->bytes, provision_now, &piece, err);
		if (st == VMM_E_HOST_OOM) {
			for (size_t k = r->first; k < r->first + r->n; k++)
				heap_backup_put(dh, &hs[k]->backup);
			put = true;
			st = backup_get(dh, r->bytes, provision_now, &piece, err);
		}
		if (st)
			return st;
		for (size_t k = r->first; k < r->first + r->n; k++) {
			if (!put)
				heap_backup_put(dh, &hs[k]->backup);
			hs[k]->backup = (vmm_host_buf){
				.ptr = (char *)piece.ptr + (hs[k]->va - hs[r->first]->va),
				.size = hs[k]->size,
			};
		}
	}
	return VMM_OK;
}

vmm_status heap_copy_engine(struct devheap *dh, vmm_error *err)
{
	vmm_status st;

	if (dh->ce)
		return VMM_OK;
	st = vmm_copy_engine_create(dh->core->be, dh->dev, &dh->ce, err);
	if (!st)
		dh->ce_destroy = vmm_copy_engine_destroy;
	return st;
}

/* Backups for the selected resident handles of one device, provisioned now, shaped as the
 * sleep will want them: a run that will become one handle gets one piece. */
vmm_status heap_provision_backups(struct devheap *dh, const struct filter *f, vmm_error *err)
{
	struct handle_run *runs = NULL;
	struct phandle **hs;
	size_t n = 0, nruns;
	vmm_status st = VMM_OK;

	for (struct phandle *h = dh->handles; h; h = h->next)
		n += arena_selected(h->arena, f) && !h->asleep && h->va;
	hs = calloc(n ? n : 1, sizeof(*hs));
	if (!hs)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to plan the backup");
	n = 0;
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (arena_selected(h->arena, f) && !h->asleep && h->va)
			hs[n++] = h;
	qsort(hs, n, sizeof(*hs), compare_handle_va);
	nruns = coalesce_runs(dh, hs, n, &runs);
	st = heap_run_backups(dh, hs, runs, nruns, 1, err);
	for (size_t i = 0; i < n && !st; i++)
		if (!hs[i]->backup.ptr)
			st = heap_backup_for(dh, hs[i], 1, err);
	free(runs);
	free(hs);
	return st;
}
