/* Memory held by its mapping alone (heap_hold.h). */
#include "heap_hold.h"

#include "log.h"

void hold_by_mapping(struct devheap *dh, struct phandle *h)
{
	vmm_backend *be = dh->core->be;

	if (!dh->core->cfg.release_on_map || !be->retain_at || h->mapping_holds || !h->va ||
	    h->size != dh->gran || h->shared || h->retained || h->asleep)
		return;
	if (be->release(be, h->h, NULL) == VMM_OK)
		h->mapping_holds = true;
}

vmm_status hold_again(struct devheap *dh, struct phandle *h, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_phys got = 0;
	vmm_status st;

	if (!h->mapping_holds)
		return VMM_OK;
	st = be->retain_at(be, h->va, &got, err);
	if (st)
		return st;
	if (got != h->h)
		vmm_log(VMM_LOG_DEBUG, "device %d: the handle mapped at 0x%llx came back as a new "
			"value", dh->dev, (unsigned long long)h->va);
	h->h = got;
	h->mapping_holds = false;
	return VMM_OK;
}
