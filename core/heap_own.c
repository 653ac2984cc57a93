/* Own handles (heap_share.h: own_*): an allocation that starts a granule but lies in several
 * physical handles is given one handle of its own before it is exported through a handle
 * (cuMemRetainAllocationHandle, as NCCL's user-buffer registration does: the other process maps
 * that one handle from its offset 0 for the whole allocation). The new handle covers the
 * allocation's granules; its contents are copied on the device from the old ones, then it is
 * mapped at the same address in their place and they are released. The bytes of other
 * allocations in the last granule (and free memory there) move along with it: they keep their
 * address and contents, and are pinned with it (heap_share.c). A sleep's joint handle
 * (heap_coalesce.h) that reaches beyond the granules is cut: the parts before and after them get
 * new handles of their own, copied the same way. The caller holds every submission of the
 * program (the shim's gate); the device is drained here before the copy. */
#include <stdlib.h>

#include "heap_internal.h"
#include "heap_release.h"
#include "heap_share.h"
#include "log.h"

bool own_has(struct devheap *dh, const struct alloc *r)
{
	vmm_devptr hi = align_up(r->base + (r->usable ? r->usable : 1), dh->gran);
	struct phandle *h = page_handle_get(dh, r->base);

	return h && h->va == r->base && h->va + h->size == hi;
}

/* The handles over [lo, hi) in address order, when all of them can move: mapped, not shared
 * with another process already, r's arena's. The first and the last may reach outside the range
 * (a joint handle: own_move cuts the parts outside off). */
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

/* A new handle in place of old memory at [va, va+size): parts[0] is what precedes the granules
 * in a joint handle cut there, parts[1] the allocation's own, parts[2] what follows (size 0:
 * none). made: created (ours to release, unless parked with its copy's mapping). */
struct part {
	vmm_devptr va;
	size_t size;
	vmm_phys h;
	bool made, parked;
};
#define NPARTS 3

/* Create each part and copy the bytes at its address into it. */
static vmm_status parts_make(struct devheap *dh, struct part *pt, vmm_error *err)
{
	vmm_status st = VMM_OK;

	for (int i = 0; i < NPARTS && !st; i++) {
		if (!pt[i].size)
			continue;
		st = create_own(dh, pt[i].size, &pt[i].h, err);
		pt[i].made = !st;
		if (!st)
			st = copy_into(dh, pt[i].h, pt[i].va, pt[i].size, &pt[i].parked, err);
	}
	return st;
}

static void parts_release(struct devheap *dh, const struct part *pt)
{
	for (int i = 0; i < NPARTS; i++)
		if (pt[i].made && !pt[i].parked)
			phys_release(dh, pt[i].h, pt[i].size);
}

/* Swap the old handles hs[0..n) for the parts: unmap them, map the parts, grant access over all,
 * or put them back. Where a part is mapped but the grant failed and it will not unmap, the
 * parts stay in their place (*kept: they hold the contents, copied, and the address cannot take
 * the old ones back) and the grant is tried once more. */
static vmm_status swap_in(struct devheap *dh, struct phandle **hs, size_t n, struct part *pt,
			  bool *kept, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_devptr from = hs[0]->va;
	size_t len = (size_t)(hs[n - 1]->va + hs[n - 1]->size - from), done = 0;
	bool mapped[NPARTS] = { false }, stuck = false;
	vmm_status st = VMM_OK;

	for (; done < n && !st; done++)
		st = be->unmap(be, hs[done]->va, hs[done]->size, err);
	if (st) {
		remap_old(dh, hs, done - 1);
		return st;
	}
	for (int i = 0; i < NPARTS && !st; i++)
		if (pt[i].size)
			mapped[i] = !(st = be->map(be, pt[i].va, pt[i].size, pt[i].h, err));
	if (!st && !(st = heap_grant_access(dh, from, len, err)))
		return VMM_OK;
	for (int i = 0; i < NPARTS; i++) {
		if (mapped[i] && !phys_unmap(be, pt[i].va, pt[i].size))
			stuck = true;
		else
			mapped[i] = false;
	}
	if (!stuck) {
		remap_old(dh, hs, n);
		return st;
	}
	*kept = true;
	for (int i = 0; i < NPARTS; i++)
		if (pt[i].size && !mapped[i])
			be->map(be, pt[i].va, pt[i].size, pt[i].h, NULL);
	st = heap_grant_access(dh, from, len, err);
	vmm_log(VMM_LOG_ERROR, "0x%llx: its new handle of its own could not be given access "
		"and would not unmap: it is kept in place of the old ones (access granted on "
		"a second try: %s)", (unsigned long long)pt[1].va, st ? "no" : "yes");
	return st;
}

vmm_status own_move(struct devheap *dh, struct alloc *r, vmm_error *err)
{
	vmm_devptr lo = r->base, hi = align_up(r->base + (r->usable ? r->usable : 1), dh->gran);
	vmm_backend *be = dh->core->be;
	struct phandle **hs, *rec[NPARTS] = { NULL };
	struct part pt[NPARTS];
	bool kept = false;
	size_t n, moved = 0;
	vmm_status st;

	if ((st = movable(dh, r, lo, hi, &hs, &n, err)))
		return st;
	pt[0] = (struct part){ .va = hs[0]->va, .size = (size_t)(lo - hs[0]->va) };
	pt[1] = (struct part){ .va = lo, .size = (size_t)(hi - lo) };
	pt[2] = (struct part){ .va = hi, .size = (size_t)(hs[n - 1]->va + hs[n - 1]->size - hi) };
	for (int i = 0; i < NPARTS; i++) {
		if (pt[i].size && !(rec[i] = calloc(1, sizeof(*rec[i])))) {
			for (int k = 0; k < i; k++)
				free(rec[k]);
			free(hs);
			return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a handle record");
		}
	}
	/* Nothing may write the old memory from here on: the caller holds new work, the device
	 * finishes what was queued. */
	if (!(st = be->synchronize(be, dh->dev, err)) && !(st = parts_make(dh, pt, err)))
		st = swap_in(dh, hs, n, pt, &kept, err);
	if (st && !kept) {
		parts_release(dh, pt);
		for (int i = 0; i < NPARTS; i++)
			free(rec[i]);
		free(hs);
		return st;
	}
	for (size_t i = 0; i < n; i++) {
		moved += hs[i]->size;
		handle_unlink(dh, hs[i]);
		handle_destroy(dh, hs[i], r->arena);
	}
	for (int i = 0; i < NPARTS; i++) {
		if (!rec[i])
			continue;
		rec[i]->h = pt[i].h;
		rec[i]->size = pt[i].size;
		rec[i]->va = pt[i].va;
		rec[i]->arena = r->arena;
		r->arena->st.handles_created++;
		page_handle_set(dh, pt[i].va, pt[i].size, rec[i]);
		handle_link(dh, rec[i]);
	}
	vmm_log(VMM_LOG_DEBUG, "0x%llx: %zu bytes moved from %zu handles (%zu bytes) into one of "
		"its own", (unsigned long long)lo, pt[1].size, n, moved);
	free(hs);
	return st;
}
