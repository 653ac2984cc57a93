/* vmmctl: list, inspect, sleep, wake and cancel processes running under vmmshim. A thin client:
 * every decision is taken inside the process (shim/control); this only finds the socket, checks
 * who answers on it, sends one request and prints the reply. Usage and exit codes: cli.c and
 * docs/vmmctl.md. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "group.h"
#include "output.h"
#include "run.h"
#include "vmmshim_version.h"

#define DEFAULT_QUERY_TIMEOUT 10.0
#define DEFAULT_CANCEL_TIMEOUT 30.0
#define DEFAULT_LIST_TIMEOUT 3.0   /* per process: one that hangs must not stall the list */
#define LIST_THREADS 32            /* processes asked at once by list */
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
	rc = client_call(&t, &req, timeout, !a->json && isatty(STDERR_FILENO), false, &reply,
			 &e);
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

/* list: every socket asked at once (LIST_THREADS at a time), each within its own deadline, so
 * that a process that does not answer costs the list one timeout, not one each. */
struct list_item {
	client_target t;
	client_reply reply;
	client_error e;
	int rc;
};

struct list_run {
	struct list_item *items;
	int n, next;
	double timeout;
	pthread_mutex_t lock;
};

static void *list_worker(void *arg)
{
	struct list_run *lr = arg;
	proto_request req = { .verb = PROTO_HELLO, .device = -1 };

	for (;;) {
		struct list_item *it;

		pthread_mutex_lock(&lr->lock);
		it = lr->next < lr->n ? &lr->items[lr->next++] : NULL;
		pthread_mutex_unlock(&lr->lock);
		if (!it)
			return NULL;
		it->rc = client_call(&it->t, &req, lr->timeout, false, true, &it->reply, &it->e);
		if (!it->rc)
			it->rc = client_reply_error(&it->reply, &it->e);
		if (!it->rc && !client_reply_find(&it->reply, "info")) {
			snprintf(it->e.message, sizeof(it->e.message), "pid %ld sent no info",
				 (long)it->t.pid);
			it->rc = EXIT_REPORTED;
		}
	}
}

static void list_note(const char *msg, void *arg)
{
	const vmmctl_args *a = arg;

	if (!a->json)
		fprintf(stderr, "vmmctl: %s\n", out_safe(msg));
}

static int by_pid(const void *x, const void *y)
{
	const struct list_item *a = x, *b = y;

	return (a->t.pid > b->t.pid) - (a->t.pid < b->t.pid);
}

static int list(const vmmctl_args *a)
{
	struct list_run lr = { .timeout = a->timeout > 0 ? a->timeout : DEFAULT_LIST_TIMEOUT };
	pthread_t threads[LIST_THREADS];
	client_target *targets;
	int n = client_list_sockets(&targets, list_note, (void *)a), nthreads = 0, count = 0;

	if (n < 0) {
		fprintf(stderr, "vmmctl: out of memory\n");
		return EXIT_REPORTED;
	}
	lr.items = calloc(n ? (size_t)n : 1, sizeof(*lr.items));
	if (!lr.items) {
		free(targets);
		fprintf(stderr, "vmmctl: out of memory\n");
		return EXIT_REPORTED;
	}
	for (int i = 0; i < n; i++)
		lr.items[i].t = targets[i];
	free(targets);
	qsort(lr.items, (size_t)n, sizeof(*lr.items), by_pid);
	lr.n = n;
	pthread_mutex_init(&lr.lock, NULL);
	for (int i = 0; i < LIST_THREADS && i < n; i++)
		if (!pthread_create(&threads[nthreads], NULL, list_worker, &lr))
			nthreads++;
	if (!nthreads)
		list_worker(&lr);
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&lr.lock);

	if (a->json)
		fputs("{\"status\": \"ok\", \"processes\": [", stdout);
	for (int i = 0; i < n; i++) {
		struct list_item *it = &lr.items[i];

		if (it->rc) {
			/* Not one we can drive (gone meanwhile, not answering, not trusted): say
			 * so on stderr. */
			if (!a->json)
				fprintf(stderr, "vmmctl: %s: %s\n", strcmp(it->e.status, "stale") ?
					"skipped" : "cleaned up", out_safe(it->e.message));
		} else if (a->json) {
			fputs(count ? ", " : "", stdout);
			out_json_record(stdout, client_reply_find(&it->reply, "info"));
			count++;
		} else {
			if (!count)
				out_list_header(stdout);
			out_list_row(stdout, client_reply_find(&it->reply, "info"));
			count++;
		}
		client_reply_free(&it->reply);
	}
	free(lr.items);
	if (a->json)
		fputs("]}\n", stdout);
	else if (!count)
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
		fprintf(stderr, "vmmctl: %s\n", out_safe(why));
		fprintf(stderr, "usage: vmmctl [--json] [--timeout S] list | status PID | "
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
	case CMD_LIST:
		return list(&a);
	case CMD_SLEEP:
	case CMD_WAKE:
		if (a.npids > 1)
			return group_run(&a);
		return one_process(&a);
	default:
		return one_process(&a);
	}
}
