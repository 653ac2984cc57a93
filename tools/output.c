/* Formatting replies. Numbers come from the wire already validated as numbers; every string from
 * a reply is escaped before it reaches a terminal (out_safe) or a JSON document
 * (out_json_string), so a process cannot send terminal escapes through vmmctl. */
#include "output.h"

#include <inttypes.h>
#include <string.h>

const char *out_safe(const char *s)
{
	/* A few buffers in turn, so that one printf may show several strings. */
	static char bufs[8][PROTO_VALUE_MAX * 4 + 1];
	static int next;
	static const char hex[] = "0123456789abcdef";
	char *b = bufs[next++ % 8];
	size_t n = 0;

	for (; s && *s && n + 5 < sizeof(bufs[0]); s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c < 0x7f && c != '\\') {
			b[n++] = (char)c;
		} else {
			b[n++] = '\\';
			b[n++] = 'x';
			b[n++] = hex[c >> 4];
			b[n++] = hex[c & 15];
		}
	}
	b[n] = '\0';
	return b;
}

const char *out_bytes(unsigned long long v, char *buf, size_t cap)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double x = (double)v;
	int u = 0;

	while (x >= 1024 && u < 4) {
		x /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%llu B", v);
	else
		snprintf(buf, cap, "%.2f %s", x, units[u]);
	return buf;
}

void out_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void out_json_record(FILE *f, const proto_record *r)
{
	fputc('{', f);
	for (int i = 0; i < r->nfields; i++) {
		const proto_field *fl = &r->fields[i];

		if (i)
			fputs(", ", f);
		out_json_string(f, fl->key);
		fputs(": ", f);
		if (fl->type == PROTO_T_STRING) {
			out_json_string(f, fl->value);
		} else if (fl->type == PROTO_T_NUMBER) {
			/* JSON numbers have no leading '+' and no bare trailing '.'. */
			const char *v = fl->value[0] == '+' ? fl->value + 1 : fl->value;
			size_t n = strlen(v);

			fprintf(f, "%s%s%s", v[0] == '.' ? "0" : "", v,
				n && v[n - 1] == '.' ? "0" : "");
		} else {
			fputs(fl->value, f);
		}
	}
	fputc('}', f);
}

/* Record kinds that may repeat are shown as arrays under a plural name. */
static const char *array_name(const char *kind)
{
	if (!strcmp(kind, "device"))
		return "devices";
	if (!strcmp(kind, "tag"))
		return "tags";
	return NULL;
}

void out_json_reply(FILE *f, const client_reply *r)
{
	fputs("{\"status\": ", f);
	out_json_string(f, r->word ? r->word : "error");
	/* Singletons first, then each array kind. */
	for (int i = 0; i < r->nrecords; i++) {
		if (array_name(r->records[i]->kind))
			continue;
		fputs(", ", f);
		out_json_string(f, r->records[i]->kind);
		fputs(": ", f);
		out_json_record(f, r->records[i]);
	}
	static const char *const kinds[] = { "device", "tag" };
	/* Status replies always carry both arrays (perhaps empty); others have neither. */
	for (int k = 0; k < 2 && client_reply_find(r, "info"); k++) {
		bool first = true;

		fprintf(f, ", \"%s\": [", array_name(kinds[k]));
		for (int i = 0; i < r->nrecords; i++) {
			if (strcmp(r->records[i]->kind, kinds[k]))
				continue;
			if (!first)
				fputs(", ", f);
			first = false;
			out_json_record(f, r->records[i]);
		}
		fputc(']', f);
	}
	fputs("}\n", f);
}

void out_json_error(FILE *f, const client_error *e)
{
	fputs("{\"status\": \"error\", \"error\": {\"status\": ", f);
	out_json_string(f, e->status);
	fputs(", \"message\": ", f);
	out_json_string(f, e->message);
	fprintf(f, ", \"exit_code\": %d}}\n", e->exit_code);
}

static uint64_t u64(const proto_record *r, const char *key)
{
	uint64_t v = 0;

	proto_record_u64(r, key, &v);
	return v;
}

/* A string field, escaped for the terminal. */
static const char *str(const proto_record *r, const char *key)
{
	const char *s = proto_record_str(r, key);

	return s ? out_safe(s) : "?";
}

/* GPU sharing (VMMSHIM_SHARE=1): one line, or nothing for a process that does not share. */
static void print_share(FILE *f, const char *indent, const proto_record *info)
{
	bool share = false, waiting = false;
	double prio = 0;

	if (!proto_record_bool(info, "share", &share) || !share)
		return;
	proto_record_double(info, "priority", &prio);
	proto_record_bool(info, "waiting", &waiting);
	fprintf(f, "%ssharing: priority %d, idle %.1f s, resident %.1f s", indent, (int)prio,
		u64(info, "idle_ms") / 1000.0, u64(info, "resident_ms") / 1000.0);
	if (u64(info, "slept_by"))
		fprintf(f, "; asleep by pid %" PRIu64 " for %.1f s (%s)", u64(info, "slept_by"),
			u64(info, "asleep_ms") / 1000.0, str(info, "slept_why"));
	fprintf(f, "; waited for memory %.1f s in %" PRIu64 " looks at %" PRIu64 " processes%s; "
		"sleeps by peers %" PRIu64 "\n", u64(info, "waited_ms") / 1000.0, u64(info, "looks"),
		u64(info, "looked_at"), waiting ? " (waiting now)" : "",
		u64(info, "slept_by_peers"));
}

static void print_info(FILE *f, const proto_record *info)
{
	char b1[32], b2[32], b3[32];
	bool held = false, autowake = false;

	proto_record_bool(info, "held", &held);
	proto_record_bool(info, "autowake", &autowake);
	fprintf(f, "pid %" PRIu64 ": %s\n", u64(info, "pid"), str(info, "command"));
	if (proto_record_str(info, "operation")) {
		/* A sleep or wake runs: the figures are being changed and come back after it. */
		fprintf(f, "  state %s%s: a %s has been running for %.1f s (memory figures come "
			"back when it ends; vmmctl cancel stops it)\n", str(info, "state"),
			held ? " (device work held until wake)" : "",
			strcmp(str(info, "operation"), "unknown") ? str(info, "operation") :
			"sleep or wake of the program", u64(info, "operation_ms") / 1000.0);
	} else {
		fprintf(f, "  state %s%s%s, managed %s (resident %s, asleep %s), devices %s\n",
			str(info, "state"), held ? " (device work held until wake)" : "",
			autowake ? " autowake" : "",
			out_bytes(u64(info, "managed"), b1, sizeof(b1)),
			out_bytes(u64(info, "resident"), b2, sizeof(b2)),
			out_bytes(u64(info, "asleep"), b3, sizeof(b3)),
			str(info, "devices")[0] ? str(info, "devices") : "none");
	}
	fprintf(f, "  vmmshim %s, protocol %" PRIu64 "; %" PRIu64
		" device allocations passed through (%s)\n", str(info, "version"),
		u64(info, "protocol"), u64(info, "passthrough_allocs"),
		out_bytes(u64(info, "passthrough_bytes"), b1, sizeof(b1)));
	print_share(f, "  ", info);
}

/* The program's own handles shared through POSIX descriptors (app_share records), one line each:
 * what keeps each resident while asleep, as far as this process can tell. */
static void out_app_shares(FILE *f, const client_reply *r)
{
	char b[32];

	for (int i = 0; i < r->nrecords; i++) {
		const proto_record *s = r->records[i];
		uint64_t pfds = 0, pfd = 0, kerr = 0;
		bool released = false;

		if (strcmp(s->kind, "app_share"))
			continue;
		fprintf(f, "  shared handle %#" PRIx64 " (device %" PRIu64 "): %s, %s", u64(s, "handle"),
			u64(s, "dev"), out_bytes(u64(s, "size"), b, sizeof(b)),
			strcmp(str(s, "role"), "import") ? "exported" : "imported");
		if (proto_record_bool(s, "released", &released) && released)
			fputs("; released by a group sleep, re-shared at wake\n", f);
		else if (proto_record_u64(s, "program_fds", &pfds) && pfds &&
		    proto_record_u64(s, "program_fd", &pfd))
			fprintf(f, "; the program holds descriptor %" PRIu64 " of it open, so the "
				"driver cannot free it\n", pfd);
		else if (proto_record_u64(s, "kcmp_errno", &kerr) && kerr)
			fprintf(f, "; whether the program holds a descriptor of it open cannot be "
				"told (kcmp: %s)\n", strerror((int)kerr));
		else
			fputs("\n", f);
	}
}

#define COLS "%-10s %12s %12s %12s %12s %12s\n"

/* The line of a sleep or wake in progress. */
static void print_progress(FILE *f, const proto_record *pr)
{
	double gbps = 0, eta = -1;
	char b[2][32];

	proto_record_double(pr, "gbps", &gbps);
	proto_record_double(pr, "eta_seconds", &eta);
	fprintf(f, "  progress: %s %s, %s of %s copied, %.2f GB/s", str(pr, "operation"),
		str(pr, "phase"), out_bytes(u64(pr, "bytes_done"), b[0], 32),
		out_bytes(u64(pr, "bytes_total"), b[1], 32), gbps);
	if (eta >= 0)
		fprintf(f, ", %.1f s left", eta);
	fputc('\n', f);
}

/* One row of the device table: label, then live, mapped, cached, asleep, host backup. */
static void print_row(FILE *f, const char *label, uint64_t live, uint64_t mapped,
		      const char *cached, uint64_t asleep, uint64_t backup)
{
	char b[4][32];

	fprintf(f, COLS, label, out_bytes(live, b[0], 32), out_bytes(mapped, b[1], 32), cached,
		out_bytes(asleep, b[2], 32), out_bytes(backup, b[3], 32));
}

/* A device's table: the heap, the program's own VMM mappings, each tag of the device. */
static void print_device_table(FILE *f, const client_reply *r, const proto_record *d)
{
	char b[32], label[48];

	fprintf(f, "\ndevice %s:%" PRIu64 "\n", str(d, "backend"), u64(d, "dev"));
	fprintf(f, COLS, "", "live", "mapped", "cached", "asleep", "host backup");
	print_row(f, "heap", u64(d, "live"), u64(d, "mapped"), out_bytes(u64(d, "cached"), b, 32),
		  u64(d, "asleep"), u64(d, "host_backup"));
	if (u64(d, "app_handles"))
		print_row(f, "app vmm", u64(d, "app_bytes"), u64(d, "app_mapped"), "-",
			  u64(d, "app_asleep"), u64(d, "app_host_backup"));
	for (int j = 0; j < r->nrecords; j++) {
		const proto_record *t = r->records[j];

		if (strcmp(t->kind, "tag") || u64(t, "dev") != u64(d, "dev") ||
		    strcmp(str(t, "backend"), str(d, "backend")))
			continue;
		snprintf(label, sizeof(label), " tag %s", str(t, "name"));
		print_row(f, label, u64(t, "live"), u64(t, "mapped"),
			  out_bytes(u64(t, "cached"), b, 32), u64(t, "asleep"),
			  u64(t, "host_backup"));
	}
}

/* Under a device's table: what stays resident and why, the driver's view, the reservation. */
static void print_device_notes(FILE *f, const proto_record *d)
{
	char b[3][32];

	if (u64(d, "release_pending"))
		fprintf(f, "  %s given back stay on the device: the driver would not take "
			"them yet; the next trim or sleep tries again\n",
			out_bytes(u64(d, "release_pending"), b[0], 32));
	if (u64(d, "app_shared"))
		fprintf(f, "  %s of the program's own mappings stay resident while asleep: "
			"shared with other processes (exported or imported handles; the "
			"driver frees them only when every holder has let go)\n",
			out_bytes(u64(d, "app_shared"), b[0], 32));
	if (u64(d, "app_unreleasable") > u64(d, "app_shared"))
		fprintf(f, "  %s of the program's own mappings stay resident while asleep: "
			"mapped in part, which this backend cannot map again\n",
			out_bytes(u64(d, "app_unreleasable") - u64(d, "app_shared"), b[0], 32));
	if (u64(d, "ipc_shared") > u64(d, "ipc_shared_asleep"))
		fprintf(f, "  %s of vmmshim's memory is mapped by other processes (CUDA IPC) "
			"and stays resident while asleep (only a group sleep of every "
			"process that opened it releases it); %s of it freed, not reusable\n",
			out_bytes(u64(d, "ipc_shared") - u64(d, "ipc_shared_asleep"), b[0], 32),
			out_bytes(u64(d, "ipc_retired"), b[1], 32));
	if (u64(d, "ipc_shared_asleep"))
		fprintf(f, "  %s of vmmshim's memory shared with other processes (CUDA IPC) "
			"was released by a group sleep; re-shared at wake\n",
			out_bytes(u64(d, "ipc_shared_asleep"), b[0], 32));
	if (u64(d, "ipc_imported"))
		fprintf(f, "  %s opened from other processes (CUDA IPC), resident\n",
			out_bytes(u64(d, "ipc_imported"), b[0], 32));
	if (proto_record_field(d, "total"))
		fprintf(f, "  driver: %s used of %s; not managed by vmmshim: %s "
			"(context, modules, pass-through%s)\n",
			out_bytes(u64(d, "used"), b[0], 32), out_bytes(u64(d, "total"), b[1], 32),
			out_bytes(u64(d, "unmanaged"), b[2], 32),
			strcmp(str(d, "backend"), "cuda") ? "" : "; on a GPU also other processes");
	fprintf(f, "  virtual address space reserved: %s\n",
		out_bytes(u64(d, "reserved"), b[0], 32));
}

void out_status(FILE *f, const client_reply *r)
{
	const proto_record *info = client_reply_find(r, "info");
	const proto_record *pr = client_reply_find(r, "progress");

	if (info)
		print_info(f, info);
	if (pr)
		print_progress(f, pr);
	for (int i = 0; i < r->nrecords; i++) {
		const proto_record *d = r->records[i];

		if (strcmp(d->kind, "device"))
			continue;
		print_device_table(f, r, d);
		print_device_notes(f, d);
	}
	out_app_shares(f, r);
}

void out_transfer(FILE *f, const char *verb, const char *what, const client_reply *r)
{
	const proto_record *res = client_reply_find(r, "result");
	bool sleeping = !strcmp(verb, "sleep");
	char b1[32], b2[32];
	double secs = 0, gbps = 0;

	if (r->word && !strcmp(r->word, "already")) {
		fprintf(f, "%s: already %s; nothing changed\n", what,
			sleeping ? "asleep" : "awake");
		return;
	}
	if (!res) {
		fprintf(f, "%s: %s done\n", what, verb);
		return;
	}
	proto_record_double(res, "seconds", &secs);
	proto_record_double(res, "gbps", &gbps);
	fprintf(f, "%s: %s. %s %s, copied %s in %.3f s (%.2f GB/s)", what,
		sleeping ? "asleep" : "awake", sleeping ? "released" : "re-created",
		out_bytes(u64(res, "released"), b1, sizeof(b1)),
		out_bytes(u64(res, "copied"), b2, sizeof(b2)), secs, gbps);
	/* Another process's memory: its exporter released (or re-created) and counts it. */
	if (u64(res, "imported"))
		fprintf(f, "; %s %s imported from another process", sleeping ? "let go" : "mapped",
			out_bytes(u64(res, "imported"), b1, sizeof(b1)));
	fputc('\n', f);
}

void out_list_header(FILE *f)
{
	fprintf(f, "%-8s %-8s %12s %12s %-10s %s\n", "PID", "STATE", "MANAGED", "ASLEEP",
		"DEVICES", "COMMAND");
}

void out_list_row(FILE *f, const proto_record *info)
{
	char b1[32] = "?", b2[32] = "?";
	const char *dev = str(info, "devices");

	/* While a sleep or wake runs the figures are left out. */
	if (proto_record_field(info, "managed"))
		out_bytes(u64(info, "managed"), b1, sizeof(b1));
	if (proto_record_field(info, "asleep"))
		out_bytes(u64(info, "asleep"), b2, sizeof(b2));
	fprintf(f, "%-8" PRIu64 " %-8s %12s %12s %-10s %s\n", u64(info, "pid"),
		str(info, "state"), b1, b2, dev[0] && strcmp(dev, "?") ? dev : "-",
		str(info, "command"));
	print_share(f, "         ", info);
}

int out_cancel(FILE *f, const char *what, const client_reply *r)
{
	const proto_record *c = client_reply_find(r, "cancel");
	const char *op = c ? str(c, "operation") : "?", *outcome = c ? str(c, "outcome") : "?";
	char msg[256];
	double secs = 0;
	int code = 0;

	if (c)
		proto_record_double(c, "seconds", &secs);
	if (!strcmp(op, "unknown"))
		op = "sleep or wake of the program";
	if (r->word && !strcmp(r->word, "already")) {
		snprintf(msg, sizeof(msg), "no sleep or wake in progress; nothing changed");
	} else if (!strcmp(outcome, "rolled_back")) {
		snprintf(msg, sizeof(msg), "the %s in progress was cancelled and rolled back "
			 "(%.3f s)", op, secs);
	} else if (!strcmp(outcome, "ended")) {
		snprintf(msg, sizeof(msg), "the %s in progress has ended (%.3f s)", op, secs);
	} else if (!strcmp(outcome, "finished")) {
		snprintf(msg, sizeof(msg), "the %s had done its work before it saw the cancel: "
			 "it stands (see vmmctl status)", op);
		code = 1;
	} else {
		snprintf(msg, sizeof(msg), "the %s has not ended after %.3f s; it rolls back at "
			 "its next step (see vmmctl status)", op, secs);
		code = 5;
	}
	if (f)
		fprintf(f, "%s: %s\n", what, msg);
	return code;
}
