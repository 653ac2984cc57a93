/* One device's sleep (heap_sleep.c), for heap_offload.c. */
#ifndef VMM_HEAP_SLEEP_H
#define VMM_HEAP_SLEEP_H

#include "heap_transfer_common.h"
#include "offload/transfer.h"

/* One device, its lock held: sleep its selected arenas, within the limits; a failure rolls back
 * or leaves the partial state (heap_sleep.c). */
vmm_status heap_sleep_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			     vmm_transfer_result *res, vmm_error *err);

#endif
