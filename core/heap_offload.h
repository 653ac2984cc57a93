/* Sleep and wake of the core's own heaps: copy live contents to host (or discard them), release
 * the physical memory while every address stays reserved; later re-create, re-map at the same
 * addresses, re-grant access (owner and peers) and copy back.
 *
 * The caller (the shim) quiesces first: it holds new work submission and allocation, so that no
 * kernel can touch the memory while it changes state. vmm_sleep synchronizes the devices itself
 * before copying. On any failure everything done so far is rolled back and nothing is lost. */
#ifndef VMM_OFFLOAD_H
#define VMM_OFFLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "heap.h"

typedef struct vmm_sleep_opts {
	const char *tag;   /* NULL: every tag */
	int device;        /* -1: every device */
	bool discard;      /* true: contents are not kept (no copy) */
} vmm_sleep_opts;

typedef struct vmm_transfer_result {
	uint64_t bytes_released;   /* physical bytes given back (sleep) or re-created (wake) */
	uint64_t bytes_copied;     /* bytes copied to or from host */
	double seconds;
	bool already;              /* nothing to do: already asleep / awake (VMM_E_ALREADY returned too) */
} vmm_transfer_result;

/* VMM_E_ALREADY when everything selected is asleep already (nothing changed); VMM_E_HOST_OOM
 * when the host backup cannot be provisioned (refused before anything is touched). */
vmm_status vmm_sleep(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		     vmm_error *err);
/* VMM_E_ALREADY when nothing selected is asleep; VMM_E_OOM when the device lacks memory: the
 * message names the bytes needed and available, everything stays asleep with its host copy, and a
 * later wake can succeed. */
vmm_status vmm_wake(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		    vmm_error *err);

/* Is anything selected asleep? */
bool vmm_is_asleep(vmm_core *core, int device, const char *tag);

/* Provision the host backup for everything currently live (so that the first sleep runs at link
 * speed). Optional. */
vmm_status vmm_provision_backup(vmm_core *core, const vmm_sleep_opts *opts, vmm_error *err);

#endif
