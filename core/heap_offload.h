/* Sleep and wake of the core's own heaps: copy live contents to host (or discard them), release
 * the physical memory while every address stays reserved; later re-create, re-map at the same
 * addresses, re-grant access (owner and peers) and copy back.
 *
 * The caller (the shim) quiesces first: it holds new work submission and allocation, so that no
 * kernel can touch the memory while it changes state. A sleep drains each device itself before
 * copying. On any failure everything done so far is rolled back and nothing is lost; where the
 * rollback itself fails, the heap is left in the partial state (offload/transfer.h). A whole
 * process (both heaps and the program's own mappings) sleeps through offload/transition.h. */
#ifndef VMM_OFFLOAD_H
#define VMM_OFFLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "heap.h"
#include "offload/transfer.h"

/* VMM_E_ALREADY when everything selected is asleep already (nothing changed); VMM_E_HOST_OOM
 * when the host backup cannot be provisioned (refused before anything is touched). VMM_OK with
 * nothing released when the selection names nothing here (no arena of that tag). */
vmm_status vmm_sleep(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		     vmm_error *err);
/* VMM_E_ALREADY when nothing selected is asleep; VMM_E_OOM when the device lacks memory: the
 * message names the bytes needed and available, everything stays asleep with its host copy, and a
 * later wake can succeed. */
vmm_status vmm_wake(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		    vmm_error *err);

/* The same within limits: each device's drain waits at most until the deadline (or drain_s), and
 * the limits are looked at between steps; VMM_E_BUSY (rolled back) once they say stop. */
vmm_status vmm_sleep_within(vmm_core *core, const vmm_sleep_opts *opts, const vmm_limits *lim,
			    vmm_transfer_result *res, vmm_error *err);
vmm_status vmm_wake_within(vmm_core *core, const vmm_sleep_opts *opts, const vmm_limits *lim,
			   vmm_transfer_result *res, vmm_error *err);

/* Undo the last successful sleep (wake) of this core: exactly what it changed, nothing else, the
 * contents kept. For an operation over several parts whose later part failed. A failure leaves
 * what could not be undone as it is (res->partial_bytes: what is asleep of it). Only lim's
 * drain_s is used: an undo is not cancelled. */
vmm_status vmm_sleep_undo(vmm_core *core, const vmm_limits *lim, vmm_transfer_result *res,
			  vmm_error *err);
vmm_status vmm_wake_undo(vmm_core *core, const vmm_limits *lim, vmm_transfer_result *res,
			 vmm_error *err);

/* Is anything selected asleep? */
bool vmm_is_asleep(vmm_core *core, int device, const char *tag);

/* Provision the host backup for everything currently live (so that the first sleep runs at link
 * speed). Optional. */
vmm_status vmm_provision_backup(vmm_core *core, const vmm_sleep_opts *opts, vmm_error *err);

#endif
