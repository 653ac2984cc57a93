/* The legacy-IPC part of a group sleep and wake, around the core's own (sleep_control.c). A sleep
 * that names its group (share_group) may release the memory the group's processes share: its
 * exports when every process that opened them is in the group, and, once its own device work is
 * drained and its memory out, what it imported from the group's exporters. A wake imports that
 * memory again before it wakes the rest, so that a failure leaves it asleep as it was. vmmctl
 * orders the members (importers sleep before and wake after their exporters: tools/group.c). */
#include <stdlib.h>

#include "../../core/log.h"
#include "../../core/vmm_share.h"
#include "../ipc_sleep.h"
#include "../runtime.h"
#include "control_internal.h"

static vmm_core *cuda_core(void)
{
	shim_runtime *rt = shim_runtime_peek();

	return rt ? rt->side[SHIM_CUDA].core : NULL;
}

vmm_status control_group_sleep(const vmm_offload_parts *parts, const vmm_selection *sel,
			       const vmm_limits *core_lim, const control_limits *lim,
			       vmm_transfer_result *r, vmm_error *err)
{
	pid_t g[IPC_SLEEP_MAX_GROUP];
	size_t n = lim && lim->share_group ?
			   ipc_sleep_parse_group(lim->share_group, g, IPC_SLEEP_MAX_GROUP) : 0;
	vmm_core *core = cuda_core();
	vmm_transfer_result ur = { 0 };
	vmm_error undo;
	size_t left;
	vmm_status s;

	if (!n || sel->tag || sel->device >= 0)
		return vmm_offload_sleep(parts, sel, core_lim, r, err);
	if (core && ipc_sleep_exports_releasable(g, n))
		vmm_share_release_allow(core, true);
	s = vmm_offload_sleep(parts, sel, core_lim, r, err);
	if (core)
		vmm_share_release_allow(core, false);
	if (s)
		return s;
	if (!(s = ipc_sleep_release(g, n, &left, err)))
		return VMM_OK;
	if (left) {
		/* Some imported memory could not be mapped again: stay asleep, held, as a failed
		 * undo leaves a process (a wake imports it again). */
		r->partial_bytes = r->bytes_released ? r->bytes_released : 1;
		return s;
	}
	vmm_error_clear(&undo);
	if (vmm_offload_wake(parts, sel, NULL, &ur, &undo)) {
		vmm_log(VMM_LOG_ERROR, "group sleep undo: %s", undo.msg);
		r->partial_bytes = ur.partial_bytes ? ur.partial_bytes : r->bytes_released;
	}
	return s;
}

vmm_status control_group_wake(const vmm_offload_parts *parts, const vmm_selection *sel,
			      const vmm_limits *core_lim, int timeout_ms, vmm_transfer_result *r,
			      vmm_error *err)
{
	pid_t g[IPC_SLEEP_MAX_GROUP];
	size_t n = sel->tag || sel->device >= 0 ? 0 :
		   ipc_sleep_released_exporters(g, IPC_SLEEP_MAX_GROUP), left;
	vmm_status s;

	if (!n)
		return vmm_offload_wake(parts, sel, core_lim, r, err);
	if ((s = ipc_sleep_restore(timeout_ms, err)))
		return s; /* restore undid itself: asleep as before */
	s = vmm_offload_wake(parts, sel, core_lim, r, err);
	if (s == VMM_E_ALREADY) {
		r->already = false;
		return VMM_OK;
	}
	if (s && ipc_sleep_release(g, n, &left, NULL) && left)
		vmm_log(VMM_LOG_ERROR, "group wake undo: imported memory stays mapped");
	return s;
}
