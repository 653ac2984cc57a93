/* Own handles (heap_share.h: own_*): an allocation that starts a granule but lies in several
 * physical handles is given one handle of its own before it is exported through a handle
 * (cuMemRetainAllocationHandle, as NCCL's user-buffer registration does: the other process maps
 * that one handle from its offset 0 for the whole allocation). The new handle covers the
 * allocation's granules; its contents are copied on the device from the old ones, then it is
 * mapped at the same address in their place and they are released. The bytes of other
 * allocations in the last granule (and free memory there) move along with it: they keep their
 * address and contents, and are pinned with it (heap_share.c). The caller holds every submission
 * of the program (the shim's gate); the device is drained here before the copy. */
#include <stdlib.h>

#include "heap_internal.h"
#include "heap_share.h"
#include "log.h"

bool own_has(struct devheap *dh, const struct alloc *r)
{
	vmm_devptr hi = align_up(r->base + (r->usable ? r->usable : 1), dh->gran);
	struct phandle *h = page_handle_get(dh, r->base);

	return h && h->va == r->base && h->va + h->size == hi;
}

/* The handles over [lo, hi) in address order, when all of them can move: mapped, not shared
 * with another process already, r's arena's, and none reaching outside the range. */
static vmm_status movable(struct devheap *dh, const struct alloc *r, vmm_devptr lo,
			  vmm_devptr hi, struct phandle ***out, size_t *n, vmm_error *err)
{
	size_t cap = (size_t)((hi - lo) / dh->gran), k = 0;
	struct phandle **hs = calloc(cap ? cap : 1, sizeof(*hs));

	if (!hs)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the list of handles");
	for (vmm_devptr va = lo; va < hi;) {
		struct phandle *h = page_handle_get(dh, va);
		const char *why = !h || !h->va || h->asleep ? "is not mapped"
			: h->shared ? "is shared with another process already"
			: h->arena != r->arena ? "belongs to another tag"
			: h->va < lo || h->va + h->size > hi ? "reaches beyond the allocation"
			: NULL;

		if (why || k == cap) {
			free(hs);
			return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "the allocation at 0x%llx cannot "
					"get a handle of its own: the memory at 0x%llx %s",
					(unsigned long long)r->base, (unsigned long long)va,
					why ? why : "is in too many handles");
		}
		hs[k++] = h;
		va = h->va + h->size;
	}
	*out = hs;
	*n = k;
	return VMM_OK;
}

vmm_status own_check(struct devheap *dh, const struct alloc *r, bool *move, vmm_error *err)
{
	vmm_devptr hi = align_up(r->base + (r->usable ? r->usable : 1), dh->gran);
	struct phandle **hs;
	size_t n;
	vmm_status st;

	*move = false;
	if (r->base & (dh->gran - 1))
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "the allocation at 0x%llx (%zu bytes) "
				"does not start a %zu-byte granule, so no handle can hold it from "
				"its offset 0", (unsigned long long)r->base, r->size, dh->gran);
	if (own_has(dh, r))
		return VMM_OK;
	if (!dh->core->be->copy_d2d_async || !dh->core->be->stream_create)
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "this backend cannot copy on the device");
	st = movable(dh, r, r->base, hi, &hs, &n, err);
	free(st ? NULL : hs);
	*move = !st;
	return st;
}

/* A new handle of size bytes, asking again after giving back cached handles when the driver is
 * out of memory (the move briefly needs the allocation's size twice). */
static vmm_status create_own(struct devheap *dh, size_t size, vmm_phys *h, vmm_error *err)
{
	vmm_backend *be = dh->core->be;

	if (be->create(be, dh->dev, size, h, NULL) == VMM_OK)
		return VMM_OK;
	heap_release_free_handles(dh, 0);
	return be->create(be, dh->dev, size, h, err);
}

/* Copy [src, src+size) to the handle nh through a temporary mapping of it. Where that mapping
 * will not go, nh is parked with it (*parked: no longer the caller's to release) and the move
 * fails. */
static vmm_status copy_into(struct devheap *dh, vmm_phys nh, vmm_devptr src, size_t size,
			    bool *parked, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_stream s = 0;
	vmm_devptr tmp;
	vmm_status st;

	if ((st = va_alloc(dh, size, &tmp, err)))
		return st;
	st = be->map(be, tmp, size, nh, err);
	if (st) {
		va_free(dh, tmp, size);
		return st;
	}
	if (!(st = heap_grant_access(dh, tmp, size, err)) &&
	    !(st = be->stream_create(be, dh->dev, &s, err))) {
		vmm_status sync;

		st = be->copy_d2d_async(be, tmp, src, size, s, err);
		sync = be->stream_synchronize(be, s, st ? NULL : err);
		st = st ? st : sync;
		be->stream_destroy(be, s, NULL);
	}
	if (!phys_unmap(be, tmp, size)) {
		phys_park_mapped(dh, nh, tmp, size, true, "a handle of its own, copied into");
		*parked = true;
		return st ? st : vmm_fail(err, VMM_E_DRIVER, 0, "the temporary mapping at 0x%llx "
					  "of the new handle would not unmap",
					  (unsigned long long)tmp);
	}
	va_free(dh, tmp, size);
	return st;
}

/* Map the old handles back where they were (a step after their unmap failed). */
static void remap_old(struct devheap *dh, struct phandle **hs, size_t n)
{
	vmm_backend *be = dh->core->be;

	for (size_t i = 0; i < n; i++)
		if (be->map(be, hs[i]->va, hs[i]->size, hs[i]->h, NULL) ||
		    heap_grant_access(dh, hs[i]->va, hs[i]->size, NULL))
			vmm_log(VMM_LOG_ERROR, "0x%llx could not be mapped again after a failed "
				"move; its memory is lost", (unsigned long long)hs[i]->va);
}

/* Swap the old handles at [lo, lo+size) for nh: unmap them, map nh, or put them back. Where nh
 * is mapped but its access grant failed and it will not unmap, it stays in their place (*kept:
 * it holds their contents, copied, and the address cannot take them back) and its grant is
 * tried once more. */
static vmm_status swap_in(struct devheap *dh, struct phandle **hs, size_t n, vmm_devptr lo,
			  size_t size, vmm_phys nh, bool *kept, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_status st = VMM_OK;
	size_t done = 0;

	for (; done < n && !st; done++)
		st = be->unmap(be, hs[done]->va, hs[done]->size, err);
	if (st) {
		remap_old(dh, hs, done - 1);
		return st;
	}
	st = be->map(be, lo, size, nh, err);
	if (!st && (st = heap_grant_access(dh, lo, size, err)) && !phys_unmap(be, lo, size)) {
		*kept = true;
		st = heap_grant_access(dh, lo, size, err);
		vmm_log(VMM_LOG_ERROR, "0x%llx: its new handle of its own could not be given access "
			"and would not unmap: it is kept in place of the old ones (access granted on "
			"a second try: %s)", (unsigned long long)lo, st ? "no" : "yes");
		return st;
	}
	if (st)
		remap_old(dh, hs, n);
	return st;
}

vmm_status own_move(struct devheap *dh, struct alloc *r, vmm_error *err)
{
	vmm_devptr lo = r->base, hi = align_up(r->base + (r->usable ? r->usable : 1), dh->gran);
	vmm_backend *be = dh->core->be;
	size_t size = (size_t)(hi - lo), n;
	struct phandle **hs, *own;
	vmm_phys nh;
	bool parked = false, kept = false;
	vmm_status st;

	if ((st = movable(dh, r, lo, hi, &hs, &n, err)))
		return st;
	own = calloc(1, sizeof(*own));
	if (!own) {
		free(hs);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a handle record");
	}
	/* Nothing may write the old memory from here on: the caller holds new work, the device
	 * finishes what was queued. */
	if ((st = be->synchronize(be, dh->dev, err)) || (st = create_own(dh, size, &nh, err))) {
		free(own);
		free(hs);
		return st;
	}
	if (((st = copy_into(dh, nh, lo, size, &parked, err)) ||
	     (st = swap_in(dh, hs, n, lo, size, nh, &kept, err))) && !kept) {
		if (!parked)
			phys_release(dh, nh, size);
		free(own);
		free(hs);
		return st;
	}
	own->h = nh;
	own->size = size;
	own->va = lo;
	own->arena = r->arena;
	r->arena->st.handles_created++;
	for (size_t i = 0; i < n; i++) {
		handle_unlink(dh, hs[i]);
		handle_destroy(dh, hs[i], r->arena);
	}
	page_handle_set(dh, lo, size, own);
	handle_link(dh, own);
	vmm_log(VMM_LOG_DEBUG, "0x%llx: %zu bytes moved from %zu handles into one of its own",
		(unsigned long long)lo, size, n);
	free(hs);
	return st;
}
