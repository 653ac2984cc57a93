/* An import of the program's that a group sleep released comes back at wake from its exporter:
 * one app_open request over the exporter's control socket (peer_request.h: our uid checked on
 * both sides), whose reply carries the new descriptor (the exporter's side: control/app_open.c).
 * Runs on the control thread inside the importer's wake, its device work still held. */
#include "app_refetch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/mono_wait.h"

#include "protocol/peer_request.h"
#include "protocol/proc_start.h"
#include "protocol/protocol.h"
#include "runtime.h"

/* The exporter answers at once from what it exported ahead, or once its own wake or sleep has
 * ended (a lookup and an export under its registry lock): a bounded wait is enough. The wake's
 * deadline bounds it further. */
#define APP_REFETCH_TIMEOUT_MS 30000
/* An exporter that says its memory is asleep may be in the middle of its own wake (two wakes
 * run at once by hand): asked again for this long, within the deadline. An exporter that stays
 * asleep fails the importer's wake soon, with why. */
#define APP_REFETCH_ASLEEP_RETRY_S 2.0

/* The first line's word and, for an error reply, its message (into msg) and status word. */
static bool reply_ok(char *text, char *msg, size_t cap, char *status, size_t scap)
{
	char *nl = strchr(text, '\n'), *line, why[96];
	const char *word = proto_parse_header(text, nl ? (size_t)(nl - text) : strlen(text));

	msg[0] = status[0] = '\0';
	if (word && !strcmp(word, "ok"))
		return true;
	for (line = nl ? nl + 1 : NULL; line && *line; line = nl ? nl + 1 : NULL) {
		proto_record rec;

		nl = strchr(line, '\n');
		if (proto_parse_record(line, nl ? (size_t)(nl - line) : strlen(line), &rec, why,
				       sizeof(why)) || strcmp(rec.kind, "error"))
			continue;
		if (proto_record_str(&rec, "message"))
			snprintf(msg, cap, "%s", proto_record_str(&rec, "message"));
		if (proto_record_str(&rec, "status"))
			snprintf(status, scap, "%s", proto_record_str(&rec, "status"));
	}
	if (!msg[0])
		snprintf(msg, cap, "unexpected reply");
	return false;
}

/* Milliseconds left before deadline (0: none, the own bound), at most the own bound. */
static int ms_left(double deadline)
{
	double ms = deadline > 0 ? (deadline - vmm_now_s()) * 1000 : APP_REFETCH_TIMEOUT_MS;

	return ms > APP_REFETCH_TIMEOUT_MS ? APP_REFETCH_TIMEOUT_MS : ms < 0 ? 0 : (int)ms;
}

/* Is pid still the process that exported (its start time as when the group slept)? A process
 * that reused the pid would hand out memory of its own, or none. */
static bool same_exporter(pid_t exporter, uint64_t exporter_start)
{
	return !exporter_start || proc_start_time(exporter) == exporter_start;
}

static vmm_status exporter_gone(pid_t exporter, vmm_phys exporter_value, vmm_error *err)
{
	return vmm_fail(err, VMM_E_NOT_OURS, 0, "pid %d, which exported the shared handle %#llx, "
			"has ended (no process of its start time has that pid now)", (int)exporter,
			(unsigned long long)exporter_value);
}

vmm_status shim_app_refetch(pid_t exporter, uint64_t exporter_start, vmm_phys exporter_value,
			    double deadline, int *fd, vmm_error *err)
{
	shim_runtime *rt = shim_runtime_peek();
	double retry_until = vmm_now_s() + APP_REFETCH_ASLEEP_RETRY_S;
	char line[128], why[256], msg[200], status[32];
	int pause_ms = 10, left;
	peer_reply reply;

	*fd = -1;
	if (!rt)
		return vmm_fail(err, VMM_E_INVALID, 0, "no runtime");
	if (!same_exporter(exporter, exporter_start))
		return exporter_gone(exporter, exporter_value, err);
	snprintf(line, sizeof(line), "%s app_open handle=\"%llu\"\n", PROTO_MAGIC,
		 (unsigned long long)exporter_value);
	for (;;) {
		if ((left = ms_left(deadline)) < 1)
			return vmm_fail(err, VMM_E_BUSY, 0, "the wake's deadline passed before pid %d "
					"gave its shared handle %#llx again", (int)exporter,
					(unsigned long long)exporter_value);
		if (peer_request(rt->cfg.run_dir, exporter, line, left, &reply, why, sizeof(why))) {
			if (kill(exporter, 0) && errno == ESRCH)
				return vmm_fail(err, VMM_E_NOT_OURS, 0, "pid %d, which exported the "
						"shared handle %#llx, has ended", (int)exporter,
						(unsigned long long)exporter_value);
			return vmm_fail(err, VMM_E_BUSY, 0, "asking pid %d for its shared handle "
					"%#llx again: %s", (int)exporter,
					(unsigned long long)exporter_value, why);
		}
		if (reply_ok(reply.text, msg, sizeof(msg), status, sizeof(status)) &&
		    reply.nfds == 1)
			break;
		peer_reply_free(&reply);
		if (strcmp(status, PROTO_ERR_BUSY) || vmm_now_s() + pause_ms / 1000.0 > retry_until ||
		    ms_left(deadline) <= pause_ms)
			return vmm_fail(err, VMM_E_BUSY, 0, "pid %d did not give its shared handle "
					"%#llx again: %s", (int)exporter,
					(unsigned long long)exporter_value,
					msg[0] ? msg : "no descriptor came");
		nanosleep(&(struct timespec){ 0, pause_ms * 1000000L }, NULL);
		pause_ms = pause_ms * 2 > 200 ? 200 : pause_ms * 2;
	}
	/* The pid answered as ours at connect; still of the same start time now, it was the
	 * exporter all along (a pid is not reused while its process lives). */
	if (!same_exporter(exporter, exporter_start)) {
		peer_reply_free(&reply);
		return exporter_gone(exporter, exporter_value, err);
	}
	*fd = reply.fds[0];
	reply.fds[0] = -1;
	peer_reply_free(&reply);
	return VMM_OK;
}
