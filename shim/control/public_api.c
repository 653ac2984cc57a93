/* shim/vmmshim.h: the in-process API, a thin layer over the orchestration (sleep_control.c) and
 * the core's statistics. Tags are thread-local: the runtime's memory hooks read them with
 * shim_thread_tag(). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../../core/offload/progress.h"
#include "../runtime.h"
#include "../vmmshim.h"
#include "control.h"
#include "control_internal.h"

_Static_assert(VMMSHIM_TAG_MAX == VMM_TAG_MAX, "one tag size");
_Static_assert((int)VMMSHIM_E_INVALID == (int)VMM_E_INVALID &&
	       (int)VMMSHIM_E_OOM == (int)VMM_E_OOM &&
	       (int)VMMSHIM_E_HOST_OOM == (int)VMM_E_HOST_OOM &&
	       (int)VMMSHIM_E_NOT_OURS == (int)VMM_E_NOT_OURS &&
	       (int)VMMSHIM_E_DRIVER == (int)VMM_E_DRIVER &&
	       (int)VMMSHIM_E_ALREADY == (int)VMM_E_ALREADY &&
	       (int)VMMSHIM_E_BUSY == (int)VMM_E_BUSY &&
	       (int)VMMSHIM_E_UNSUPPORTED == (int)VMM_E_UNSUPPORTED,
	       "the public result numbers are the core's statuses");

static _Thread_local char thread_tag[VMM_TAG_MAX];
static _Thread_local char last_error[sizeof(((vmm_error *)0)->msg)];

static int result(vmm_status s, const vmm_error *err)
{
	if (s)
		snprintf(last_error, sizeof(last_error), "%s",
			 err && err->msg[0] ? err->msg : vmm_status_name(s));
	else
		last_error[0] = '\0';
	return (int)s;
}

static int invalid(const char *msg)
{
	snprintf(last_error, sizeof(last_error), "%s", msg);
	return VMMSHIM_E_INVALID;
}

static bool valid_tag(const char *tag)
{
	size_t n = strnlen(tag, VMM_TAG_MAX);

	if (n == 0 || n >= VMM_TAG_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)tag[i] < 0x20 || (unsigned char)tag[i] > 0x7e)
			return false;
	return true;
}

VMMSHIM_API int vmmshim_set_tag(const char *tag)
{
	if (!tag || !tag[0]) {
		thread_tag[0] = '\0';
		shim_set_thread_tag(NULL);
		return result(VMM_OK, NULL);
	}
	if (!valid_tag(tag))
		return invalid("a tag has 1 to 31 printable ASCII bytes");
	memcpy(thread_tag, tag, strlen(tag) + 1);
	shim_set_thread_tag(thread_tag);
	return result(VMM_OK, NULL);
}

VMMSHIM_API const char *vmmshim_get_tag(void)
{
	const char *t = shim_thread_tag();

	return t && t[0] ? t : VMM_DEFAULT_TAG;
}

static int check_tag_arg(const char *tag)
{
	if (tag && !valid_tag(tag))
		return invalid("a tag has 1 to 31 printable ASCII bytes (NULL: every tag)");
	return VMMSHIM_OK;
}

VMMSHIM_API int vmmshim_sleep_device(const char *tag, int device, int discard)
{
	vmm_sleep_opts opts = { .tag = tag, .device = device, .discard = discard != 0 };
	vmm_error err;
	int r = check_tag_arg(tag);

	if (r)
		return r;
	vmm_error_clear(&err);
	return result(shim_sleep(&opts, false, NULL, &err), &err);
}

VMMSHIM_API int vmmshim_wake_device(const char *tag, int device)
{
	vmm_sleep_opts opts = { .tag = tag, .device = device, .discard = false };
	vmm_error err;
	int r = check_tag_arg(tag);

	if (r)
		return r;
	vmm_error_clear(&err);
	return result(shim_wake(&opts, NULL, &err), &err);
}

VMMSHIM_API int vmmshim_sleep(const char *tag, int discard)
{
	return vmmshim_sleep_device(tag, -1, discard);
}

VMMSHIM_API int vmmshim_wake(const char *tag)
{
	return vmmshim_wake_device(tag, -1);
}

/* vmmshim_stats_t carries the VMM_HEAP_STATS fields marked PUBLIC (core/stats_fields.h). A
 * PUBLIC field missing from it does not compile; one it has that the list does not mark PUBLIC
 * fails the size check. */
#define PUBLIC_ADD_PUBLIC(field) out->field += st->field;
#define PUBLIC_ADD_PRIVATE(field)
#define PUBLIC_ADD(field, source, wire, records, public) PUBLIC_ADD_##public(field)
#define PUBLIC_COUNT_PUBLIC 1 +
#define PUBLIC_COUNT_PRIVATE
#define PUBLIC_COUNT(field, source, wire, records, public) PUBLIC_COUNT_##public
_Static_assert((VMM_HEAP_STATS(PUBLIC_COUNT) 0) * sizeof(uint64_t) == sizeof(vmmshim_stats_t),
	       "vmmshim_stats_t has exactly the VMM_HEAP_STATS fields marked PUBLIC");

static void add_stats(vmmshim_stats_t *out, const vmm_stats *st)
{
	VMM_HEAP_STATS(PUBLIC_ADD)
}

VMMSHIM_API int vmmshim_stats(const char *tag, int device, vmmshim_stats_t *out)
{
	vmm_core *cores[SHIM_NSIDES];
	shim_runtime *rt = shim_runtime_peek();
	vmm_error err;
	int n = 0, r;

	if (!out)
		return invalid("no place for the statistics (out is NULL)");
	memset(out, 0, sizeof(*out));
	if ((r = check_tag_arg(tag)))
		return r;
	if (device < -1 || device >= VMM_MAX_DEVICES)
		return invalid("device must be -1 (all) or a device ordinal");
	for (int i = 0; rt && i < SHIM_NSIDES; i++)
		if (rt->side[i].core)
			cores[n++] = rt->side[i].core;
	for (int i = 0; i < n; i++) {
		vmm_stats st;
		vmm_status s;

		/* A device the heap never used has nothing to add. */
		if (device >= 0 && !(vmm_devices_used(cores[i]) & (1u << device)))
			continue;
		vmm_error_clear(&err);
		s = vmm_stats_get(cores[i], device, tag, &st, &err);
		if (s)
			return result(s, &err);
		add_stats(out, &st);
	}
	return result(VMM_OK, NULL);
}

_Static_assert((int)VMMSHIM_PHASE_NONE == (int)VMM_PHASE_NONE &&
	       (int)VMMSHIM_PHASE_PREPARING == (int)VMM_PHASE_PREPARING &&
	       (int)VMMSHIM_PHASE_COPYING == (int)VMM_PHASE_COPYING &&
	       (int)VMMSHIM_PHASE_ROLLING_BACK == (int)VMM_PHASE_ROLLING_BACK &&
	       (int)VMMSHIM_PHASE_DONE == (int)VMM_PHASE_DONE, "the public phases are the core's");

static void public_progress(const vmm_progress *p, vmmshim_progress_t *out)
{
	memset(out, 0, sizeof(*out));
	out->bytes_done = p->bytes_done;
	out->bytes_total = p->bytes_total;
	out->seconds = p->seconds;
	out->gbps = p->copy_seconds > 0 ? (double)p->bytes_done / p->copy_seconds / 1e9 : 0;
	out->sleeping = p->sleeping;
	out->phase = (int)p->phase;
}

/* The program's callback, called through the core's: replaced only while the core has none, so
 * that no call can read it half-written (progress_set_lock orders the setters). */
static pthread_mutex_t progress_set_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	vmmshim_progress_fn fn;
	void *arg;
} user_progress;

static void call_user_progress(const vmm_progress *p, void *arg)
{
	vmmshim_progress_t pub;

	(void)arg;
	public_progress(p, &pub);
	user_progress.fn(&pub, user_progress.arg);
}

VMMSHIM_API int vmmshim_set_progress_callback(vmmshim_progress_fn fn, void *arg, double interval_s)
{
	vmm_error err;
	vmm_status s;

	vmm_error_clear(&err);
	if (!(interval_s >= 0) || interval_s > 3600)
		return invalid("the progress interval is 0 to 3600 seconds");
	/* Refused from inside the callback before any lock is taken: another thread may hold
	 * progress_set_lock while it waits for this very call to return. */
	if (vmm_progress_in_callback())
		return result(vmm_fail(&err, VMM_E_BUSY, 0, "the progress callback cannot be "
				       "replaced from inside itself"), &err);
	pthread_mutex_lock(&progress_set_lock);
	s = vmm_progress_set_callback(NULL, NULL, interval_s, &err);
	if (!s) {
		user_progress.fn = fn;
		user_progress.arg = arg;
		if (fn)
			s = vmm_progress_set_callback(call_user_progress, NULL, interval_s, &err);
	}
	pthread_mutex_unlock(&progress_set_lock);
	return result(s, &err);
}

VMMSHIM_API int vmmshim_get_progress(vmmshim_progress_t *out)
{
	vmm_progress p;

	if (!out)
		return invalid("no place for the progress (out is NULL)");
	vmm_progress_get(&p);
	public_progress(&p, out);
	return result(VMM_OK, NULL);
}

VMMSHIM_API const char *vmmshim_last_error(void)
{
	return last_error;
}
