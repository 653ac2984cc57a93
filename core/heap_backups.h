/* Host backups of the heap's handles, the ranges copied, the device's copy engine
 * (heap_backups.c), for a sleep and a wake. */
#ifndef VMM_HEAP_BACKUPS_H
#define VMM_HEAP_BACKUPS_H

#include "heap_coalesce.h"
#include "heap_transfer_common.h"
#include "offload/transfer.h"

/* The live ranges of h with their places in its backup, appended to *r. */
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
