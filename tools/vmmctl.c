/* vmmctl: list, inspect, measure, sleep, wake and cancel processes running under vmmshim. A thin client:
 * every decision is taken inside the process (shim/control); this only finds the socket, checks
 * who answers on it, sends one request and prints the reply. Usage and exit codes: cli.c and
 * docs/vmmctl.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "group.h"
#include "metrics.h"
#include "output.h"
#include "progress_line.h"
#include "run.h"
#include "survey.h"
#include "watch.h"
#include "vmmshim_version.h"

#define DEFAULT_QUERY_TIMEOUT 10.0
#define DEFAULT_CANCEL_TIMEOUT 30.0
#define DEFAULT_LIST_TIMEOUT 3.0   /* per process: one that hangs must not stall the list */
#define MAX_SERVER_MS 3600000      /* the protocol's bound on timeout_ms */

static int report(const vmmctl_args *a, const client_error *e)
{
	if (a->json)
		out_json_error(stdout, e);
	else
		fprintf(stderr, "vmmctl: %s\n", out_safe(e->message));
	return e->exit_code;
}

/* The share of the client's timeout the process gets for the operation itself, so that it can
 * roll back and answer before vmmctl stops waiting (0: the process's default). */
static int server_ms(double timeout)
{
	double ms = timeout * 1000, margin = ms / 10 < 1000 ? ms / 10 : 1000;

	if (timeout <= 0)
		return 0;
	ms -= margin;
	return ms < 1 ? 1 : ms > MAX_SERVER_MS ? MAX_SERVER_MS : (int)ms;
}

/* "pid 42", "pid 42 tag kv device 1": what a sleep or wake was about. */
static const char *describe(const vmmctl_args *a)
{
	static char what[96];
	int n = snprintf(what, sizeof(what), "pid %ld", (long)a->pid);

	if (a->tag[0])
		n += snprintf(what + n, sizeof(what) - (size_t)n, " tag %s", out_safe(a->tag));
	if (a->device >= 0)
		snprintf(what + n, sizeof(what) - (size_t)n, " device %d", a->device);
	return what;
}

/* status / sleep / wake / cancel of one process. */
static int one_process(const vmmctl_args *a)
{
	proto_request req = { .device = a->device, .discard = a->discard,
			      .autowake = a->autowake };
	client_reply reply;
	client_error e = { 0 };
	client_target t;
	double timeout = a->timeout;
	int rc;

	switch (a->cmd) {
	case CMD_STATUS:
		req.verb = PROTO_STATUS;
		if (timeout <= 0)
			timeout = DEFAULT_QUERY_TIMEOUT;
		break;
	case CMD_CANCEL:
		req.verb = PROTO_CANCEL;
		if (timeout <= 0)
			timeout = DEFAULT_CANCEL_TIMEOUT;
		req.timeout_ms = server_ms(timeout);
		break;
	default:
		req.verb = a->cmd == CMD_SLEEP ? PROTO_SLEEP : PROTO_WAKE;
		req.timeout_ms = server_ms(timeout);
		break;
	}
	snprintf(req.tag, sizeof(req.tag), "%s", a->tag);
	if ((rc = client_find_socket(a->pid, &t, &e)))
		return report(a, &e);
	if (a->cmd == CMD_SLEEP || a->cmd == CMD_WAKE) {
		/* On a terminal, or asked for: what is copied, how fast, how long is left. */
		struct progress_line pl = { .tty = isatty(STDERR_FILENO) };
		bool show = a->progress || (!a->json && pl.tty);

		rc = client_call_tick(&t, &req, timeout, show ? progress_line_tick : NULL, &pl,
				      false, &reply, &e);
	} else {
		rc = client_call(&t, &req, timeout, !a->json && isatty(STDERR_FILENO), false,
				 &reply, &e);
	}
	if (!rc)
		rc = client_reply_error(&reply, &e);
	if (rc) {
		client_reply_free(&reply);
		return report(a, &e);
	}
	if (a->cmd == CMD_CANCEL) {
		rc = out_cancel(a->json ? NULL : stdout, describe(a), &reply);
		if (a->json)
			out_json_reply(stdout, &reply);
	} else if (a->json) {
		out_json_reply(stdout, &reply);
	} else if (a->cmd == CMD_STATUS) {
		out_status(stdout, &reply);
	} else {
		out_transfer(stdout, a->cmd == CMD_SLEEP ? "sleep" : "wake", describe(a), &reply);
	}
	client_reply_free(&reply);
	return rc;
}

static void list_note(const char *msg, void *arg)
{
	const vmmctl_args *a = arg;

	if (!a->json)
		fprintf(stderr, "vmmctl: %s\n", out_safe(msg));
}

/* Every socket asked at once (survey.c); verb: hello for list, status for metrics. */
static int survey(const vmmctl_args *a, proto_verb verb, survey_item **items)
{
	int n = survey_run(verb, a->timeout > 0 ? a->timeout : DEFAULT_LIST_TIMEOUT, list_note,
			   (void *)a, items);

	if (n < 0)
		fprintf(stderr, "vmmctl: out of memory\n");
	return n;
}

/* Say on stderr which sockets were not answered (people only: JSON and metrics say it their
 * way). */
static void report_skipped(const vmmctl_args *a, const survey_item *items, int n)
{
	for (int i = 0; i < n && !a->json; i++)
		if (items[i].rc)
			fprintf(stderr, "vmmctl: %s: %s\n", strcmp(items[i].e.status, "stale") ?
				"skipped" : "cleaned up", out_safe(items[i].e.message));
}

static int list(const vmmctl_args *a)
{
	survey_item *items;
	int n = survey(a, PROTO_HELLO, &items), count = 0;

	if (n < 0)
		return EXIT_REPORTED;
	report_skipped(a, items, n);
	if (a->json)
		fputs("{\"status\": \"ok\", \"processes\": [", stdout);
	for (int i = 0; i < n; i++) {
		const proto_record *info = items[i].rc ? NULL :
					   client_reply_find(&items[i].reply, "info");

		if (!info)
			continue;
		if (a->json) {
			fputs(count ? ", " : "", stdout);
			out_json_record(stdout, info);
		} else {
			if (!count)
				out_list_header(stdout);
			out_list_row(stdout, info);
		}
		count++;
	}
	survey_free(items, n);
	if (a->json)
		fputs("]}\n", stdout);
	else if (!count)
		printf("no process under vmmshim (that you may drive) has a control socket\n");
	return EXIT_OK;
}

struct metrics_run {
	survey_item *items;
	int n;
	const vmmctl_args *a;
};

static void print_metrics(FILE *f, void *arg)
{
	struct metrics_run *mr = arg;

	metrics_print(f, mr->items, mr->n, mr->a->labels, mr->a->nlabels);
}

static int metrics(const vmmctl_args *a)
{
	struct metrics_run mr = { .a = a };
	char why[600];
	int rc = EXIT_OK;

	mr.n = survey(a, PROTO_STATUS, &mr.items);
	if (mr.n < 0)
		return EXIT_REPORTED;
	if (!a->output) {
		metrics_print(stdout, mr.items, mr.n, a->labels, a->nlabels);
	} else if (metrics_write_file(a->output, print_metrics, &mr, why, sizeof(why))) {
		fprintf(stderr, "vmmctl: %s\n", out_safe(why));
		rc = EXIT_REPORTED;
	}
	survey_free(mr.items, mr.n);
	return rc;
}

/* One run of the command (--watch runs it again and again). */
static int run_once(const vmmctl_args *a)
{
	switch (a->cmd) {
	case CMD_LIST:
		return list(a);
	case CMD_METRICS:
		return metrics(a);
	default:
		return one_process(a);
	}
}

int main(int argc, char **argv)
{
	vmmctl_args a;
	char why[256];

	/* `vmmctl run` takes a program's command line: its own parser (run.c). */
	if (argc > 1 && !strcmp(argv[1], "run"))
		return run_main(argc - 1, argv + 1);
	if (cli_parse(argc, argv, &a, why, sizeof(why))) {
		fprintf(stderr, "vmmctl: %s\n", out_safe(why));
		fprintf(stderr, "usage: vmmctl [--json] [--timeout S] list | metrics | status PID | "
			"sleep PID [PID...] [--tag T] [--device N] [--discard] [--autowake] | "
			"wake PID [PID...] [--tag T] [--device N] | cancel PID   (vmmctl --help)\n");
		return EXIT_USAGE;
	}
	switch (a.cmd) {
	case CMD_HELP:
		cli_usage(stdout);
		return EXIT_OK;
	case CMD_VERSION:
		printf("vmmctl %s (protocol %s)\n", VMMSHIM_VERSION, PROTO_MAGIC);
		return EXIT_OK;
	case CMD_SLEEP:
	case CMD_WAKE:
		if (a.npids > 1)
			return group_run(&a);
		return one_process(&a);
	default:
		if (a.watch)
			return watch_run(&a, run_once);
		return run_once(&a);
	}
}
