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

static vmm_app_registry *cuda_app(void)
{
	shim_runtime *rt = shim_runtime_peek();

	return rt ? rt->side[SHIM_CUDA].app : NULL;
}

/* "H,H:PID:XH[:START],..." (checked by the protocol) into out; returns how many. */
static size_t parse_release(const char *s, vmm_app_release *out, size_t max)
{
	size_t n = 0;

	while (s && *s && n < max) {
		char *end;

		out[n] = (vmm_app_release){ .app = strtoull(s, &end, 10) };
		if (*end == ':') {
			out[n].exporter = (pid_t)strtol(end + 1, &end, 10);
			out[n].exporter_value = strtoull(end + 1, &end, 10);
			if (*end == ':')
				out[n].exporter_start = strtoull(end + 1, &end, 10);
		}
		n++;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

/* The sleep with the program's shared VMM handles that vmmctl named (every holder is a member)
 * released too: marked for this sleep only. */
static vmm_status sleep_releasing(const vmm_offload_parts *parts, const vmm_selection *sel,
				  const vmm_limits *core_lim, const control_limits *lim,
				  vmm_transfer_result *r, vmm_error *err)
{
	/* The control thread runs one request at a time. */
	static vmm_app_release list[PROTO_APP_RELEASE_MAX / 2];
	vmm_app_registry *app = cuda_app();
	size_t n = lim && lim->app_release && !sel->tag && sel->device < 0 ?
			   parse_release(lim->app_release, list, sizeof(list) / sizeof(list[0])) : 0;
	vmm_status s;

	if (app && n)
		vmm_app_group_release(app, list, n, NULL);
	s = vmm_offload_sleep(parts, sel, core_lim, r, err);
	if (app && n)
		vmm_app_group_release(app, NULL, 0, NULL);
	return s;
}

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
	uint64_t imported;
	size_t left;
	vmm_status s;

	if (!n || sel->tag || sel->device >= 0)
		return sleep_releasing(parts, sel, core_lim, lim, r, err);
	if (core && ipc_sleep_exports_releasable(g, n))
		vmm_share_release_allow(core, true);
	s = sleep_releasing(parts, sel, core_lim, lim, r, err);
	if (core)
		vmm_share_release_allow(core, false);
	if (s)
		return s;
	if (!(s = ipc_sleep_release(g, n, &left, &imported, err))) {
		r->bytes_imported += imported;
		return VMM_OK;
	}
	if (left) {
		/* Some imported memory could not be mapped again: stay asleep, held, as a failed
		 * undo leaves a process (a wake imports it again). */
		r->partial_bytes = r->bytes_released ? r->bytes_released : 1;
		return s;
	}
	/* The undo wakes what was released: an import the group released comes back from its
	 * exporter, awake at this point (importers sleep first). */
	vmm_error_clear(&undo);
	if (vmm_offload_wake(parts, sel, NULL, &ur, &undo)) {
		vmm_log(VMM_LOG_ERROR, "group sleep undo: %s", undo.msg);
		r->partial_bytes = ur.partial_bytes ? ur.partial_bytes : r->bytes_released;
	}
	return s;
}

/* The core's wake, leaving the imports a group released asleep when the request defers them. */
static vmm_status wake_deferring(const vmm_offload_parts *parts, const vmm_selection *sel,
				 const vmm_limits *core_lim, const control_limits *lim,
				 vmm_transfer_result *r, vmm_error *err)
{
	vmm_app_registry *app = lim && lim->app_defer ? cuda_app() : NULL;
	vmm_status s;

	vmm_app_defer_imports(app, true);
	s = vmm_offload_wake(parts, sel, core_lim, r, err);
	vmm_app_defer_imports(app, false);
	return s;
}

vmm_status control_group_wake(const vmm_offload_parts *parts, const vmm_selection *sel,
			      const vmm_limits *core_lim, const control_limits *lim,
			      vmm_transfer_result *r, vmm_error *err)
{
	int timeout_ms = lim ? lim->timeout_ms : 0;
	pid_t g[IPC_SLEEP_MAX_GROUP];
	size_t n = sel->tag || sel->device >= 0 ? 0 :
		   ipc_sleep_released_exporters(g, IPC_SLEEP_MAX_GROUP), left;
	uint64_t imported;
	vmm_status s;

	if (!n)
		return wake_deferring(parts, sel, core_lim, lim, r, err);
	if ((s = ipc_sleep_restore(timeout_ms, &imported, err)))
		return s; /* restore undid itself: asleep as before */
	s = wake_deferring(parts, sel, core_lim, lim, r, err);
	if (s == VMM_E_ALREADY) {
		r->already = false;
		s = VMM_OK;
	}
	if (!s) {
		r->bytes_imported += imported;
		return VMM_OK;
	}
	if (ipc_sleep_release(g, n, &left, NULL, NULL) && left)
		vmm_log(VMM_LOG_ERROR, "group wake undo: imported memory stays mapped");
	return s;
}
