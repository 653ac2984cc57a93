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

/* 1: the call's form submits outside the legacy stream; 0: it does not. */
static signed char form_of(const char *name)
{
	return strstr(name, "_ptsz") || strstr(name, "_ptds") || strstr(name, "Peer") ||
	       strstr(name, "MultiDevice");
}

void one_stream_submit_slow(const char *name, _Atomic signed char *form, bool has_stream,
			    CUstream s)
{
	signed char f = atomic_load_explicit(form, memory_order_relaxed);
	char why[96];

	if (f < 0) {
		f = form_of(name);
		atomic_store_explicit(form, f, memory_order_relaxed);
	}
	if (f) {
		snprintf(why, sizeof(why), "called %s", name);
		one_stream_end(why);
	} else if (has_stream && s && s != CU_STREAM_LEGACY) {
		snprintf(why, sizeof(why), "called %s on a stream other than the default", name);
		one_stream_end(why);
	}
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
