/* One device's wake, and the restore of released handles that a failed sleep also uses
 * (heap_wake.c). */
#ifndef VMM_HEAP_WAKE_H
#define VMM_HEAP_WAKE_H

#include "heap_transfer_common.h"
#include "offload/transfer.h"

/* One device, its lock held: wake its selected arenas, within the limits; all or nothing. */
vmm_status heap_wake_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			    vmm_transfer_result *res, vmm_error *err);
/* Does the device have the memory to wake what is selected? VMM_E_OOM when not. */
vmm_status heap_wake_fits(struct devheap *dh, const struct filter *f, vmm_error *err);
/* Re-create, map, grant and (unless no_copy) fill the released handles hs[0..n), adding the bytes
 * copied and the copy's time to *res; on failure they are released again, their host copies
 * untouched. */
vmm_status heap_restore_handles(struct devheap *dh, struct phandle **hs, size_t n, bool no_copy,
				vmm_transfer_result *res, vmm_error *err);

#endif
