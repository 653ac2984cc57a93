/* The shim's life in the process (lifecycle.h). The runtime below knows nothing of the control
 * server or GPU sharing; they sit above it and use it, so what starts them with the first side,
 * and stops them at exit before the runtime is torn down, lives here, above all three.
 *
 * Nothing here runs before the first device allocation: no constructor, no thread, no file. */
#include "lifecycle.h"

#include <pthread.h>
#include <stdlib.h>

#include "../core/backend/backend.h"
#include "../core/log.h"
#include "app_refetch.h"
#include "control/control.h"
#include "ipc_keep.h"
#include "ipc_registry.h"
#include "share/share.h"
#include "shim_internal.h"

/* Set under the runtime's creation lock (side_ready runs there), read only there. */
static bool exit_registered, control_started;

static void at_exit(void)
{
	bool quiet;

	if (shim_in_forked_child())
		return; /* the parent's runtime: not ours to tear down */
	/* A sleep or wake still running (on the control thread, or another of the program's) is
	 * cancelled and waited for, bounded; if it does not end in time, nothing it may still use
	 * is freed: the process's end takes it. */
	quiet = control_sleep_shutdown();
	/* The export ahead in progress uses the CUDA heap: it ends first (bounded). */
	quiet = ipc_keep_shutdown(CONTROL_EXIT_WAIT_MS) && quiet;
	share_members_exit();
	shim_runtime_teardown(quiet);
}

static void in_child(void)
{
	shim_runtime *rt = shim_runtime_mark_forked();

	gate_reset_after_fork();
	vmm_captures_after_fork();
	ipc_registry_after_fork();
	/* The child must not hold the parent's memory through kept export descriptors. */
	ipc_keep_after_fork(rt->side[SHIM_CUDA].core);
	shim_runtime_sides_after_fork();
	share_members_after_fork();
}

/* GPU sharing, once the control server runs: peers reach a sharing process through its socket,
 * and an automatic wake then waits for memory under the sharing rules. */
static void start_sharing(shim_runtime *rt)
{
	share_init(rt);
	if (share_enabled())
		control_set_autowake_waker(share_autowake);
}

/* A side was just created (shim_runtime_side: under its creation lock, before other threads see
 * it). */
static void side_ready(shim_runtime *rt, enum shim_side_id id)
{
	vmm_error err;

	/* Imports a group sleep released are fetched again through the control path. */
	if (rt->side[id].app)
		vmm_app_set_refetch(rt->side[id].app, shim_app_refetch);
	if (!exit_registered) {
		exit_registered = true;
		if (atexit(at_exit))
			vmm_log(VMM_LOG_WARN, "cannot register the exit handler: memory is freed by "
				"the driver at exit instead");
		pthread_atfork(NULL, NULL, in_child);
	}
	if (!control_started && rt->cfg.control) {
		control_started = true;
		vmm_error_clear(&err);
		if (shim_control_start(rt, &err))
			vmm_log(VMM_LOG_WARN, "control server not started: %s", err.msg);
		else
			start_sharing(rt);
	} else if (!control_started && rt->cfg.share) {
		vmm_log(VMM_LOG_WARN, "VMMSHIM_SHARE=1 needs the control socket (VMMSHIM_CONTROL=1): "
			"not sharing");
	}
}

shim_runtime *shim_runtime_cuda(void)
{
	return shim_runtime_side(SHIM_CUDA, side_ready);
}

shim_runtime *shim_runtime_acl(void)
{
	return shim_runtime_side(SHIM_ACL, side_ready);
}
