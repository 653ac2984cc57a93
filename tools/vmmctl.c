/* vmmctl: list, inspect, sleep and wake processes running under vmmshim. A thin client: every
 * decision is taken inside the process (shim/control); this only finds the socket, sends one
 * request and prints the reply. Usage and exit codes: cli.c and docs/vmmctl.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "output.h"
#include "run.h"
#include "vmmshim_version.h"

#define DEFAULT_QUERY_TIMEOUT 10.0
#define DEFAULT_LIST_TIMEOUT 3.0   /* per process: one that hangs must not stall the list */

static int report(const vmmctl_args *a, const client_error *e)
{
	if (a->json)
		out_json_error(stdout, e);
	else
		fprintf(stderr, "vmmctl: %s\n", e->message);
	return e->exit_code;
}

/* "pid 42", "pid 42 tag kv device 1": what a sleep or wake was about. */
static const char *describe(const vmmctl_args *a)
{
	static char what[96];
	int n = snprintf(what, sizeof(what), "pid %ld", (long)a->pid);

	if (a->tag[0])
		n += snprintf(what + n, sizeof(what) - (size_t)n, " tag %s", a->tag);
	if (a->device >= 0)
		snprintf(what + n, sizeof(what) - (size_t)n, " device %d", a->device);
	return what;
}

/* status / sleep / wake of one process. */
static int one_process(const vmmctl_args *a)
{
	proto_request req = { .device = a->device, .discard = a->discard,
			      .autowake = a->autowake };
	client_reply reply;
	client_error e = { 0 };
	char path[512];
	double timeout = a->timeout;
	int rc;

	req.verb = a->cmd == CMD_STATUS ? PROTO_STATUS : a->cmd == CMD_SLEEP ? PROTO_SLEEP :
									      PROTO_WAKE;
	snprintf(req.tag, sizeof(req.tag), "%s", a->tag);
	if (timeout <= 0 && a->cmd == CMD_STATUS)
		timeout = DEFAULT_QUERY_TIMEOUT;
	if ((rc = client_find_socket(a->pid, path, sizeof(path), &e)))
		return report(a, &e);
	rc = client_call(path, a->pid, &req, timeout, !a->json && isatty(STDERR_FILENO), &reply,
			 &e);
	if (!rc)
		rc = client_reply_error(&reply, &e);
	if (rc) {
		client_reply_free(&reply);
		return report(a, &e);
	}
	if (a->json)
		out_json_reply(stdout, &reply);
	else if (a->cmd == CMD_STATUS)
		out_status(stdout, &reply);
	else
		out_transfer(stdout, a->cmd == CMD_SLEEP ? "sleep" : "wake", describe(a), &reply);
	client_reply_free(&reply);
	return EXIT_OK;
}

struct list_state {
	const vmmctl_args *args;
	int count;
};

static void list_one(const char *path, pid_t pid, void *arg)
{
	struct list_state *ls = arg;
	proto_request req = { .verb = PROTO_HELLO, .device = -1 };
	double timeout = ls->args->timeout > 0 ? ls->args->timeout : DEFAULT_LIST_TIMEOUT;
	client_reply reply;
	client_error e = { 0 };
	const proto_record *info;

	if (client_call(path, pid, &req, timeout, false, &reply, &e) ||
	    client_reply_error(&reply, &e) || !(info = client_reply_find(&reply, "info"))) {
		/* Not one we can drive (another user's, or gone meanwhile): say so on stderr. */
		if (!ls->args->json)
			fprintf(stderr, "vmmctl: pid %ld: %s\n", (long)pid,
				e.message[0] ? e.message : "no info");
		client_reply_free(&reply);
		return;
	}
	if (ls->args->json) {
		fputs(ls->count ? ", " : "", stdout);
		out_json_record(stdout, info);
	} else {
		if (!ls->count)
			out_list_header(stdout);
		out_list_row(stdout, info);
	}
	ls->count++;
	client_reply_free(&reply);
}

static int list(const vmmctl_args *a)
{
	struct list_state ls = { .args = a };

	if (a->json)
		fputs("{\"status\": \"ok\", \"processes\": [", stdout);
	client_each_socket(list_one, &ls);
	if (a->json)
		fputs("]}\n", stdout);
	else if (!ls.count)
		printf("no process under vmmshim (that you may drive) has a control socket\n");
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	vmmctl_args a;
	char why[256];

	/* `vmmctl run` takes a program's command line: its own parser (run.c). */
	if (argc > 1 && !strcmp(argv[1], "run"))
		return run_main(argc - 1, argv + 1);
	if (cli_parse(argc, argv, &a, why, sizeof(why))) {
		fprintf(stderr, "vmmctl: %s\n", why);
		fprintf(stderr, "usage: vmmctl [--json] [--timeout S] list | status PID | "
			"sleep PID [--tag T] [--device N] [--discard] [--autowake] | "
			"wake PID [--tag T] [--device N]   (vmmctl --help)\n");
		return EXIT_USAGE;
	}
	switch (a.cmd) {
	case CMD_HELP:
		cli_usage(stdout);
		return EXIT_OK;
	case CMD_VERSION:
		printf("vmmctl %s (protocol %s)\n", VMMSHIM_VERSION, PROTO_MAGIC);
		return EXIT_OK;
	case CMD_LIST:
		return list(&a);
	default:
		return one_process(&a);
	}
}
