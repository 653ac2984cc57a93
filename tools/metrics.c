/* metrics.h. Families are written one at a time over every process (the format wants each
 * family's samples together, after its HELP and TYPE); a family none of the processes has is
 * left out. Label values are escaped as the format says (\\, \", \n), and bytes outside printable
 * ASCII are written as the four characters \xHH, so that no process can break the file. */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where a sample's value comes from: a field of the records of one kind. */
struct family {
	const char *name, *type, *help;
	const char *kind;        /* record kind: info, device, tag, counters, progress */
	const char *field;
	const char *extra_label; /* a fixed label ("direction=\"out\""), or NULL */
};

static const struct family families[] = {
	{ "vmmshim_device_live_bytes", "gauge",
	  "Bytes asked for by live allocations the shim manages.", "device", "live", NULL },
	{ "vmmshim_device_mapped_bytes", "gauge",
	  "Physical device memory the shim has mapped (live and cached).", "device", "mapped", NULL },
	{ "vmmshim_device_cached_bytes", "gauge",
	  "Mapped device memory kept free for reuse.", "device", "cached", NULL },
	{ "vmmshim_device_quarantined_bytes", "gauge",
	  "Bytes the program freed that wait for a device synchronization before reuse.", "device",
	  "quarantined", NULL },
	{ "vmmshim_device_asleep_bytes", "gauge",
	  "Device memory released by sleep, re-created at wake.", "device", "asleep", NULL },
	{ "vmmshim_device_host_backup_bytes", "gauge",
	  "Host memory holding sleeping contents.", "device", "host_backup", NULL },
	{ "vmmshim_device_reserved_bytes", "gauge",
	  "Virtual address space the shim reserved.", "device", "reserved", NULL },
	{ "vmmshim_device_release_pending_bytes", "gauge",
	  "Device memory the driver would not take back yet (released again later).", "device",
	  "release_pending", NULL },
	{ "vmmshim_device_app_bytes", "gauge",
	  "The program's own VMM allocations the shim tracks.", "device", "app_bytes", NULL },
	{ "vmmshim_device_app_asleep_bytes", "gauge",
	  "The program's own VMM allocations asleep.", "device", "app_asleep", NULL },
	{ "vmmshim_device_used_bytes", "gauge",
	  "Device memory in use as the driver says (on a GPU: all processes).", "device", "used",
	  NULL },
	{ "vmmshim_device_total_bytes", "gauge",
	  "Device memory capacity as the driver says.", "device", "total", NULL },
	{ "vmmshim_device_unmanaged_bytes", "gauge",
	  "Device memory in use that the shim does not manage.", "device", "unmanaged", NULL },
	{ "vmmshim_tag_live_bytes", "gauge",
	  "Bytes asked for by live allocations of a tag.", "tag", "live", NULL },
	{ "vmmshim_tag_mapped_bytes", "gauge",
	  "Physical device memory mapped for a tag.", "tag", "mapped", NULL },
	{ "vmmshim_tag_cached_bytes", "gauge",
	  "Mapped device memory of a tag kept free for reuse.", "tag", "cached", NULL },
	{ "vmmshim_tag_asleep_bytes", "gauge",
	  "Device memory of a tag released by sleep.", "tag", "asleep", NULL },
	{ "vmmshim_tag_host_backup_bytes", "gauge",
	  "Host memory holding a tag's sleeping contents.", "tag", "host_backup", NULL },
	{ "vmmshim_sleeps_total", "counter",
	  "Sleeps that completed.", "counters", "sleeps", NULL },
	{ "vmmshim_wakes_total", "counter",
	  "Wakes that completed.", "counters", "wakes", NULL },
	{ "vmmshim_transition_failures_total", "counter",
	  "Sleeps and wakes that failed or were cancelled (rolled back).", "counters", "failures",
	  NULL },
	{ "vmmshim_copied_bytes_total", "counter",
	  "Bytes copied by completed sleeps (out) and wakes (in).", "counters", "bytes_out",
	  "direction=\"out\"" },
	{ "vmmshim_copied_bytes_total", NULL, NULL, "counters", "bytes_in", "direction=\"in\"" },
	{ "vmmshim_transition_seconds_total", "counter",
	  "Seconds spent in completed sleeps and wakes.", "counters", "sleep_seconds",
	  "operation=\"sleep\"" },
	{ "vmmshim_transition_seconds_total", NULL, NULL, "counters", "wake_seconds",
	  "operation=\"wake\"" },
	{ "vmmshim_held_calls_total", "counter",
	  "Device calls that waited because the process was asleep.", "counters", "held_calls",
	  NULL },
	{ "vmmshim_progress_bytes_done", "gauge",
	  "The sleep or wake in progress: bytes copied so far.", "progress", "bytes_done", NULL },
	{ "vmmshim_progress_bytes_total", "gauge",
	  "The sleep or wake in progress: bytes to copy (an estimate until copies start).",
	  "progress", "bytes_total", NULL },
	{ "vmmshim_progress_seconds", "gauge",
	  "The sleep or wake in progress: seconds since it began.", "progress", "seconds", NULL },
	/* GPU sharing (VMMSHIM_SHARE=1): only processes that take part have these. */
	{ "vmmshim_share_priority", "gauge",
	  "Sharing priority of a process with VMMSHIM_SHARE=1.", "info", "priority", NULL },
	{ "vmmshim_share_waiting", "gauge",
	  "1 while an allocation or wake of the sharing process waits for memory.", "info",
	  "waiting", NULL },
	{ "vmmshim_share_wait_seconds_total", "counter",
	  "Seconds the sharing process's allocations and wakes waited for memory.", "info",
	  "waited_ms", NULL },
	{ "vmmshim_share_looks_total", "counter",
	  "Rounds of making room for memory (each asks every sharing peer of the GPU).", "info",
	  "looks", NULL },
	{ "vmmshim_share_looked_at_total", "counter",
	  "Processes those rounds asked (the members of the GPU, each round).", "info",
	  "looked_at", NULL },
	{ "vmmshim_share_slept_by_peers_total", "counter",
	  "Times a sharing peer slept the process to make room.", "info", "slept_by_peers",
	  NULL },
};

static void put_label(FILE *f, const char *name, const char *v)
{
	static const char hex[] = "0123456789abcdef";

	fprintf(f, "%s=\"", name);
	for (; v && *v; v++) {
		unsigned char c = (unsigned char)*v;

		if (c == '\\' || c == '"')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\\\x%c%c", hex[c >> 4], hex[c & 15]);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* A number field as the format wants it (Go's ParseFloat syntax), a flag as 1 or 0; NULL when
 * absent. */
static const char *number(const proto_record *r, const char *key)
{
	const proto_field *fl = proto_record_field(r, key);

	if (fl && fl->type == PROTO_T_BOOL)
		return strcmp(fl->value, "true") ? "0" : "1";
	if (!fl || fl->type != PROTO_T_NUMBER)
		return NULL;
	return fl->value[0] == '+' ? fl->value + 1 : fl->value;
}

/* The caller's constant labels, for this print. */
static const char *const *extra_labels;
static int n_extra_labels;

/* ",name=\"value\"" for each of the caller's labels. */
static void put_extra(FILE *f)
{
	for (int i = 0; i < n_extra_labels; i++) {
		const char *eq = strchr(extra_labels[i], '=');
		char name[65];

		snprintf(name, sizeof(name), "%.*s", (int)(eq - extra_labels[i]), extra_labels[i]);
		fputc(',', f);
		put_label(f, name, eq + 1);
	}
}

static void put_sample(FILE *f, const struct family *fm, const survey_item *it,
		       const proto_record *r)
{
	const char *v = number(r, fm->field);
	char pid[24], seconds[40];

	if (!v)
		return;
	/* Wire fields named *_ms count milliseconds; the format wants seconds. */
	if (strlen(fm->field) > 3 && !strcmp(fm->field + strlen(fm->field) - 3, "_ms")) {
		snprintf(seconds, sizeof(seconds), "%.3f", strtod(v, NULL) / 1000);
		v = seconds;
	}
	snprintf(pid, sizeof(pid), "%ld", (long)it->t.pid);
	fprintf(f, "%s{", fm->name);
	put_label(f, "pid", pid);
	if (!strcmp(fm->kind, "device") || !strcmp(fm->kind, "tag")) {
		fputc(',', f);
		put_label(f, "backend", proto_record_str(r, "backend"));
		fputc(',', f);
		put_label(f, "device", number(r, "dev"));
	}
	if (!strcmp(fm->kind, "tag")) {
		fputc(',', f);
		put_label(f, "tag", proto_record_str(r, "name"));
	}
	if (!strcmp(fm->kind, "progress")) {
		fputc(',', f);
		put_label(f, "operation", proto_record_str(r, "operation"));
		fputc(',', f);
		put_label(f, "phase", proto_record_str(r, "phase"));
	}
	if (fm->extra_label)
		fprintf(f, ",%s", fm->extra_label);
	put_extra(f);
	fprintf(f, "} %s\n", v);
}

static void put_family(FILE *f, const struct family *fm, const survey_item *items, int n,
		       bool *headed)
{
	for (int i = 0; i < n; i++) {
		const client_reply *rp = &items[i].reply;

		if (items[i].rc)
			continue;
		for (int k = 0; k < rp->nrecords; k++) {
			if (strcmp(rp->records[k]->kind, fm->kind) ||
			    !number(rp->records[k], fm->field))
				continue;
			if (!*headed) {
				fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fm->name, fm->help,
					fm->name, fm->type);
				*headed = true;
			}
			put_sample(f, fm, &items[i], rp->records[k]);
		}
	}
}

/* One sample per process: its identity and state as labels, value 1. */
static void put_info(FILE *f, const survey_item *items, int n)
{
	bool headed = false;

	for (int i = 0; i < n; i++) {
		const proto_record *info = items[i].rc ? NULL :
					   client_reply_find(&items[i].reply, "info");
		char pid[24];
		bool held = false;

		if (!info)
			continue;
		if (!headed) {
			fputs("# HELP vmmshim_process_info A process under vmmshim that answered; "
			      "state is awake, asleep, partial or changing.\n"
			      "# TYPE vmmshim_process_info gauge\n", f);
			headed = true;
		}
		proto_record_bool(info, "held", &held);
		snprintf(pid, sizeof(pid), "%ld", (long)items[i].t.pid);
		fputs("vmmshim_process_info{", f);
		put_label(f, "pid", pid);
		fputc(',', f);
		put_label(f, "command", proto_record_str(info, "command"));
		fputc(',', f);
		put_label(f, "version", proto_record_str(info, "version"));
		fputc(',', f);
		put_label(f, "state", proto_record_str(info, "state"));
		fputc(',', f);
		put_label(f, "held", held ? "true" : "false");
		put_extra(f);
		fputs("} 1\n", f);
	}
}

/* A family of one sample without per-process labels. */
static void put_scalar(FILE *f, const char *name, const char *help, int v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s", name, help, name, name);
	if (n_extra_labels) {
		fputc('{', f);
		/* put_extra starts each label with a comma: the first one without. */
		for (int i = 0; i < n_extra_labels; i++) {
			const char *eq = strchr(extra_labels[i], '=');
			char lname[65];

			snprintf(lname, sizeof(lname), "%.*s", (int)(eq - extra_labels[i]),
				 extra_labels[i]);
			if (i)
				fputc(',', f);
			put_label(f, lname, eq + 1);
		}
		fputc('}', f);
	}
	fprintf(f, " %d\n", v);
}

void metrics_print(FILE *f, const survey_item *items, int n, const char *const *labels,
		   int nlabels)
{
	int answered = 0;

	extra_labels = labels;
	n_extra_labels = nlabels;
	for (int i = 0; i < n; i++)
		answered += !items[i].rc;
	put_scalar(f, "vmmshim_processes", "Processes under vmmshim that answered.", answered);
	put_scalar(f, "vmmshim_processes_skipped", "Control sockets that did not answer, or whose "
		   "process may not be driven.", n - answered);
	put_info(f, items, n);
	for (size_t k = 0; k < sizeof(families) / sizeof(families[0]); k++) {
		bool headed;

		if (!families[k].type)
			continue; /* a continuation: written with its family below */
		headed = false;
		put_family(f, &families[k], items, n, &headed);
		for (size_t j = k + 1; j < sizeof(families) / sizeof(families[0]) &&
				       !families[j].type; j++)
			put_family(f, &families[j], items, n, &headed);
	}
}

int metrics_write_file(const char *path, void (*print)(FILE *f, void *arg), void *arg, char *why,
		       size_t whylen)
{
	size_t n = strlen(path);
	char *tmp = malloc(n + 16);
	FILE *f = NULL;
	int fd, saved;

	if (!tmp) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	snprintf(tmp, n + 16, "%s.tmp.XXXXXX", path);
	fd = mkstemp(tmp);
	if (fd < 0) {
		snprintf(why, whylen, "cannot create a file beside %s: %s", path, strerror(errno));
		free(tmp);
		return -1;
	}
	/* Readable by the collector (mkstemp makes it 0600). */
	if (fchmod(fd, 0644) || !(f = fdopen(fd, "w")))
		goto fail;
	print(f, arg);
	if (fflush(f) || ferror(f) || fsync(fd))
		goto fail;
	if (fclose(f)) {
		f = NULL;
		fd = -1;
		goto fail;
	}
	f = NULL;
	fd = -1;
	if (rename(tmp, path))
		goto fail;
	free(tmp);
	return 0;
fail:
	saved = errno;
	if (f)
		fclose(f);
	else if (fd >= 0)
		close(fd);
	unlink(tmp);
	snprintf(why, whylen, "cannot write %s: %s", path, strerror(saved));
	free(tmp);
	return -1;
}
