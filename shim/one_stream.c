/* One-stream reuse, the shim's half (one_stream.h): watch what the program submits and where,
 * and end the core's mode before anything is issued outside the one stream. */
#include "one_stream.h"

#include <stdio.h>
#include <string.h>

#include "../core/log.h"
#include "hooks_common.h"

atomic_bool one_stream_live = true;
static atomic_int first_device = -1;

void one_stream_end(const char *why)
{
	vmm_core *core;
	vmm_error err;

	if (!atomic_exchange(&one_stream_live, false))
		return;
	core = hook_cuda_core();
	if (!core || !vmm_ordered_reuse_on(core))
		return;
	vmm_error_clear(&err);
	if (vmm_ordered_reuse_end(core, &err))
		vmm_log(VMM_LOG_WARN, "the device sync that ends one-stream reuse failed: %s",
			err.msg);
	vmm_log(VMM_LOG_INFO, "freed memory waits for a device sync from now on: the program %s",
		why);
}

/* What a call's name says of where its work goes. */
enum form { FORM_DEFAULT, FORM_PER_THREAD, FORM_OTHER_CONTEXT };

static signed char form_of(const char *name)
{
	if (strstr(name, "Peer") || strstr(name, "MultiDevice"))
		return FORM_OTHER_CONTEXT;
	return strstr(name, "_ptsz") || strstr(name, "_ptds") ? FORM_PER_THREAD : FORM_DEFAULT;
}

static atomic_bool side_logged;

/* Work on another stream of this context: pause (the core syncs first when it was on). */
static bool side_begin(const char *name, CUstream s)
{
	vmm_core *core = hook_cuda_core();
	vmm_error err;

	if (!core)
		return false;
	vmm_error_clear(&err);
	if (vmm_ordered_side_begin(core, &err))
		vmm_log(VMM_LOG_WARN, "the device sync before work on another stream failed: %s",
			err.msg);
	if (!atomic_exchange(&side_logged, true))
		vmm_log(VMM_LOG_INFO, "one-stream reuse pauses: the program called %s on stream %p; "
			"freed memory waits for a device sync until that work is done", name,
			(void *)s);
	return true;
}

bool one_stream_submit_slow(const char *name, _Atomic signed char *form, bool has_stream,
			    CUstream s)
{
	signed char f = atomic_load_explicit(form, memory_order_relaxed);
	char why[96];

	if (f < 0) {
		f = form_of(name);
		atomic_store_explicit(form, f, memory_order_relaxed);
	}
	if (f == FORM_OTHER_CONTEXT) {
		snprintf(why, sizeof(why), "called %s", name);
		one_stream_end(why);
		return false;
	}
	if (f == FORM_PER_THREAD || (has_stream && s && s != CU_STREAM_LEGACY))
		return side_begin(name, s);
	return false;
}

void one_stream_side_done(void)
{
	vmm_core *core = hook_cuda_core();

	if (core)
		vmm_ordered_side_end(core);
}

void one_stream_device_used(int dev)
{
	int none = -1;

	if (!atomic_load_explicit(&one_stream_live, memory_order_relaxed))
		return;
	if (!atomic_compare_exchange_strong(&first_device, &none, dev) && none != dev)
		one_stream_end("uses a second device");
}

void one_stream_begin(vmm_core *core, bool enabled)
{
	if (!enabled) {
		atomic_store(&one_stream_live, false);
		return;
	}
	if (!atomic_load(&one_stream_live))
		return;
	vmm_ordered_reuse_start(core);
	/* Ended while the heap was being made: its end found no heap to tell. */
	if (!atomic_load(&one_stream_live))
		vmm_ordered_reuse_end(core, NULL);
}
