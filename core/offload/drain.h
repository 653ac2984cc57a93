/* Waiting for a device to finish its work, within limits. The backend's synchronize has no
 * timeout, and a device can be kept busy for good by work that waits for something the sleep
 * itself holds back (a kernel spinning on a flag that a copy held at the submission gate would
 * write). So the synchronize runs on a helper thread, one for the process, started at the first
 * drain and reused, while the caller waits with the deadline and polls its cancelled() callback.
 * A drain that is given up goes on there until the device is done; it touches only the helper's
 * own state, never the caller's. */
#ifndef VMM_OFFLOAD_DRAIN_H
#define VMM_OFFLOAD_DRAIN_H

#include <stdbool.h>

#include "../backend/backend.h"
#include "transfer.h"

/* be->synchronize(be, dev) within lim (NULL: on the calling thread, unbounded). VMM_E_BUSY with
 * "device N did not drain within T s: ..." when the deadline passes first, or "cancelled" when
 * lim->cancelled says so; the device's work is not affected either way. */
vmm_status vmm_drain(vmm_backend *be, int dev, const vmm_limits *lim, vmm_error *err);

/* No drain is running, not even one that was given up: the backends may be closed. */
bool vmm_drain_idle(void);

/* Wait (until the vmm_now_s() time `until`) for vmm_drain_idle(); returns it. */
bool vmm_drain_wait_idle(double until);

#endif
