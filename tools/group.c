/* vmmctl sleep PID PID... / wake PID PID...: several processes (the ranks of a job, a trainer and
 * its inference engine) as one operation, all of them or none, over their control sockets.
 *
 * Two phases. Prepare: every member is asked at once to sleep (its gate closed, its device
 * drained, its memory copied out and released, everything kept: its host copy and its addresses,
 * so that a wake brings it back exactly). Commit: when every member has answered ok the group is
 * asleep. Abort: when one fails, the members that went to sleep in this attempt are woken again
 * (each failed member has rolled itself back); a member whose undo fails stays in the partial
 * state its own sleep defines (asleep with its host copy; `vmmctl wake PID` completes it) and is
 * named. A group wake is the same with the roles swapped: a member that fails stays asleep, the
 * others are put back to sleep.
 *
 * Collectives. A rank whose launch waits at its closed gate while its peers' kernels wait for it
 * in a collective would hold their drains forever. Each member's drain is therefore bounded
 * (drain_ms, short at first) and a sleep that could not drain is aborted on every member, which
 * reopens every gate so the collective completes, then retried with a longer drain, until the
 * group's deadline. Requests go out to all members at once, so that the gates close together.
 *
 * Shared memory (legacy CUDA IPC through the shim). When a member has exported memory that
 * another process opened, the group goes in two phases, so that an exporter copies its shared
 * memory out only once every importer in the group is drained and has let it go, and an importer
 * maps it again only once its exporter has re-created it: a sleep asks the other members first
 * (they release what they imported from the group), then the exporters (they release exports all
 * of whose importers sleep); a wake asks the exporters first. Each sleep request names the
 * members whose imports are released (share_group). An abort undoes the second phase first. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/mono_wait.h"
#include "client.h"
#include "group.h"
#include "group_release.h"
#include "group_shares.h"
#include "output.h"

/* An undo is tried even when the deadline has passed: it gets at least this long. */
#define GROUP_UNDO_MIN_S 10.0

struct member {
	pid_t pid;
	client_target t;
	/* The last request's outcome. */
	int rc;                 /* 0: a reply came (it may be an error reply) */
	client_reply reply;
	client_error e;
	bool changed;           /* this operation put it in the asked state (answered ok) */
	uint64_t earlier_released, earlier_copied, earlier_imported; /* its first-phase result,
	                          * when a second request (its exports) replaced that reply */
	bool undone;            /* ...and it was put back (abort) */
	bool undo_failed;       /* ...and putting it back failed: it is left as its undo left it */
	char undo_msg[512];
	/* Filled for the call. */
	proto_request req;
	double timeout;
};

/* The process's share of the client's time (vmmctl.c: server_ms): it must roll back and answer
 * before vmmctl stops waiting. */
static int server_ms(double timeout)
{
	double ms = timeout * 1000, margin = ms / 10 < 1000 ? ms / 10 : 1000;

	ms -= margin;
	return ms < 1 ? 1 : ms > 3600000 ? 3600000 : (int)ms;
}

static void *call_one(void *arg)
{
	struct member *m = arg;

	client_reply_free(&m->reply);
	memset(&m->e, 0, sizeof(m->e));
	m->rc = client_call(&m->t, &m->req, m->timeout, false, false, &m->reply, &m->e);
	if (!m->rc)
		m->rc = client_reply_error(&m->reply, &m->e);
	return NULL;
}

/* Send each selected member its request, all at once, and wait for every answer. */
static void call_all(struct member *ms, int n, const bool *sel)
{
	pthread_t th[VMMCTL_MAX_GROUP];
	bool started[VMMCTL_MAX_GROUP] = { false };

	for (int i = 0; i < n; i++)
		if (sel[i])
			started[i] = !pthread_create(&th[i], NULL, call_one, &ms[i]);
	for (int i = 0; i < n; i++) {
		if (started[i])
			pthread_join(th[i], NULL);
		else if (sel[i])
			call_one(&ms[i]);
	}
}

static bool answered(const struct member *m, const char *word)
{
	return !m->rc && m->reply.word && !strcmp(m->reply.word, word);
}

/* A failure worth another attempt: the member gave up waiting (its drain or gate, another
 * operation in progress) and rolled back. */
static bool retryable(const struct member *m)
{
	return m->rc == EXIT_REPORTED && !strcmp(m->e.status, PROTO_ERR_BUSY);
}

/* Put the members that sel selects back: wake them after a failed sleep (defer[i]: bringing back
 * its exports only, its imports at a second request), sleep them (held) after a failed wake.
 * clear: they count as put back once this request answers (a deferred one waits for its second). */
static void undo_step(struct member *ms, int n, const bool *sel, const bool *defer,
		      proto_verb verb, bool autowake, double deadline, bool clear)
{
	double left = deadline - vmm_now_s();

	if (left < GROUP_UNDO_MIN_S)
		left = GROUP_UNDO_MIN_S;
	for (int i = 0; i < n; i++) {
		if (!sel[i])
			continue;
		ms[i].req = (proto_request){ .verb = verb == PROTO_SLEEP ? PROTO_WAKE : PROTO_SLEEP,
					     .device = -1, .autowake = autowake,
					     .app_defer = defer && defer[i],
					     .timeout_ms = server_ms(left) };
		ms[i].timeout = left;
	}
	call_all(ms, n, sel);
	for (int i = 0; i < n; i++) {
		if (!sel[i])
			continue;
		if (answered(&ms[i], "ok") || answered(&ms[i], "already")) {
			if (clear || !(defer && defer[i])) {
				ms[i].changed = false;
				ms[i].undone = true;
			}
		} else {
			ms[i].changed = false;
			ms[i].undo_failed = true;
			snprintf(ms[i].undo_msg, sizeof(ms[i].undo_msg), "%s", ms[i].e.message);
		}
	}
}

/* A failed sleep is undone as a group wake runs: the members whose exports went in the second
 * phase wake first (those that also released imports bring back their exports only), then the
 * first phase's members fetch their imports from exporters that are awake by then. Woken all at
 * once, an importer could ask an exporter whose own undo had not re-created the memory yet. A
 * failed wake is undone importers first (they let go before their exporters sleep again). */
static void undo(struct member *ms, int n, const bool *first, const bool *second, proto_verb verb,
		 bool autowake, double deadline)
{
	bool sel[VMMCTL_MAX_GROUP], defer[VMMCTL_MAX_GROUP];

	for (int i = 0; i < n; i++) {
		sel[i] = ms[i].changed && second[i];
		defer[i] = verb == PROTO_SLEEP && first[i];
	}
	undo_step(ms, n, sel, defer, verb, autowake, deadline, false);
	for (int i = 0; i < n; i++)
		sel[i] = ms[i].changed && first[i];
	undo_step(ms, n, sel, NULL, verb, autowake, deadline, true);
}

static bool ms_any_undo_failed(const struct member *ms, int n)
{
	for (int i = 0; i < n; i++)
		if (ms[i].undo_failed)
			return true;
	return false;
}

/* Asking each member what it shares, after a sleep: a status, answered at once. */
#define GROUP_SHARES_TIMEOUT_S 5.0

static const client_target *targets_of(const struct member *ms, int n)
{
	static client_target t[VMMCTL_MAX_GROUP];

	for (int i = 0; i < n; i++)
		t[i] = ms[i].t;
	return t;
}

/* The members an undo put back are asked where they are: an answer of "ok" to a wake that left
 * imports asleep, or an undo that ended some other way than asked, must not be reported as "as
 * it was". A failed sleep's members should be awake and not held; a failed wake's asleep. */
static void check_undone(struct member *ms, int n, proto_verb verb)
{
	static client_reply r[VMMCTL_MAX_GROUP];
	bool sel[VMMCTL_MAX_GROUP], got[VMMCTL_MAX_GROUP], any = false;
	const char *want = verb == PROTO_SLEEP ? "awake" : "asleep";

	for (int i = 0; i < n; i++)
		any = (sel[i] = ms[i].undone) || any;
	if (!any)
		return;
	memset(r, 0, sizeof(r));
	group_shares_status(targets_of(ms, n), n, sel, GROUP_SHARES_TIMEOUT_S, r, got);
	for (int i = 0; i < n; i++) {
		const proto_record *info = got[i] ? client_reply_find(&r[i], "info") : NULL;
		const char *state = info ? proto_record_str(info, "state") : NULL;
		bool held = false;

		if (!sel[i])
			continue;
		if (info)
			proto_record_bool(info, "held", &held);
		if (state && !strcmp(state, want) && !(verb == PROTO_SLEEP && held)) {
			client_reply_free(&r[i]);
			continue;
		}
		ms[i].undone = false;
		ms[i].undo_failed = true;
		if (!state)
			snprintf(ms[i].undo_msg, sizeof(ms[i].undo_msg), "it did not say where it is "
				 "after the undo");
		else
			snprintf(ms[i].undo_msg, sizeof(ms[i].undo_msg), "it is %s%s after the undo",
				 out_safe(state), held ? " and held" : "");
		client_reply_free(&r[i]);
	}
}

/* Where a group operation's time went (seconds), for --json: the parts a single-process sleep
 * does not have (finding, planning, the pauses between attempts, the shares report) beside the
 * members' requests themselves. */
struct group_steps {
	double find, plan, phases, undo, pauses, report;
	const char *shared;        /* the shares report, rendered (NULL: print it directly) */
	struct share_kept kept[MAX_SHARES];   /* memories too many for the requests */
	int nkept;
};

static void print_steps(const struct group_steps *st)
{
	printf(", \"steps\": {\"find_s\": %.6f, \"plan_s\": %.6f, \"phases_s\": %.6f, "
	       "\"undo_s\": %.6f, \"pauses_s\": %.6f, \"report_s\": %.6f}", st->find, st->plan,
	       st->phases, st->undo, st->pauses, st->report);
}

static void print_shared(const struct member *ms, int n, const struct group_steps *st, bool json)
{
	if (st->shared)
		fputs(st->shared, stdout);
	else
		group_shares_report(targets_of(ms, n), n, GROUP_SHARES_TIMEOUT_S, st->kept,
				    st->nkept, json, stdout);
}

/* The members' results summed: key "released", "copied" or "imported", both phases' replies. */
static uint64_t total(const struct member *ms, int n, const char *key)
{
	uint64_t sum = 0;

	for (int i = 0; i < n; i++) {
		const struct member *m = &ms[i];
		const proto_record *res = m->rc ? NULL : client_reply_find(&m->reply, "result");
		uint64_t v;

		if (!res)
			continue;
		if (proto_record_u64(res, key, &v))
			sum += v;
		sum += !strcmp(key, "released") ? m->earlier_released :
		       !strcmp(key, "copied")   ? m->earlier_copied : m->earlier_imported;
	}
	return sum;
}

static void print_json(const struct member *ms, int n, const char *verb, bool ok, int attempts,
		       double secs, const struct group_steps *st)
{
	printf("{\"status\": \"%s\", \"operation\": \"%s\", \"attempts\": %d, \"seconds\": %.6f, "
	       "\"released\": %" PRIu64 ", \"imported\": %" PRIu64 ", \"copied\": %" PRIu64 ", "
	       "\"members\": [", ok ? "ok" : "error", verb, attempts, secs,
	       total(ms, n, "released"), total(ms, n, "imported"), total(ms, n, "copied"));
	for (int i = 0; i < n; i++) {
		const struct member *m = &ms[i];
		const proto_record *res = m->rc ? NULL : client_reply_find(&m->reply, "result");
		const char *outcome = m->undo_failed ? "undo_failed" : m->undone ? "undone" :
				      m->rc ? "error" : m->reply.word ? m->reply.word : "error";

		printf("%s{\"pid\": %ld, \"outcome\": \"%s\"", i ? ", " : "", (long)m->pid, outcome);
		if (m->rc || m->undo_failed) {
			fputs(", \"status\": ", stdout);
			out_json_string(stdout, m->undo_failed ? "undo_failed" : m->e.status);
			fputs(", \"message\": ", stdout);
			out_json_string(stdout, m->undo_failed ? m->undo_msg : m->e.message);
		}
		if (res && !m->undone && !m->undo_failed) {
			fputs(", \"result\": ", stdout);
			out_json_record(stdout, res);
		}
		fputs("}", stdout);
	}
	fputs("]", stdout);
	print_steps(st);
	if (ok && !strcmp(verb, "sleep")) {
		fputs(", \"shared\": ", stdout);
		print_shared(ms, n, st, true);
	}
	puts("}");
}

static void print_text(const struct member *ms, int n, const char *verb, bool ok, int attempts,
		       double secs, const struct group_steps *st)
{
	bool sleeping = !strcmp(verb, "sleep");
	uint64_t released = total(ms, n, "released"), copied = total(ms, n, "copied");
	char what[32], b1[32], b2[32];

	for (int i = 0; i < n; i++) {
		const struct member *m = &ms[i];

		snprintf(what, sizeof(what), "pid %ld", (long)m->pid);
		if (m->undo_failed)
			fprintf(stderr, "vmmctl: %s: putting it back failed (%s): it stays %s; "
				"`vmmctl %s %ld` completes it\n", what, out_safe(m->undo_msg),
				sleeping ? "asleep (with its host copy)" : "awake",
				sleeping ? "wake" : "sleep", (long)m->pid);
		else if (m->undone)
			fprintf(stderr, "vmmctl: %s: put back (%s again)\n", what,
				sleeping ? "awake" : "asleep");
		else if (m->rc)
			fprintf(stderr, "vmmctl: %s: %s failed: %s\n", what, verb,
				out_safe(m->e.message));
		else if (ok)
			out_transfer(stdout, verb, what, &m->reply);
	}
	if (ok && sleeping)
		print_shared(ms, n, st, false);
	if (ok)
		printf("group of %d: %s. %s %s, copied %s in %.3f s (%d attempt%s)\n", n,
		       sleeping ? "asleep" : "awake", sleeping ? "released" : "re-created",
		       out_bytes(released, b1, sizeof(b1)), out_bytes(copied, b2, sizeof(b2)), secs,
		       attempts, attempts == 1 ? "" : "s");
	else
		fprintf(stderr, "vmmctl: group %s of %d processes failed after %d attempt%s: every "
			"process is as it was%s\n", verb, n, attempts, attempts == 1 ? "" : "s",
			ms_any_undo_failed(ms, n) ? ", except those named above" : "");
}

/* Has this member exported memory that another process opened (or keeps shared memory whose
 * export was freed since)? Read from its status reply; a member that did not answer counts as
 * not. */
static bool exports_shared(const struct member *m)
{
	bool yes = false;

	if (m->rc)
		return false;
	for (int j = 0; j < m->reply.nrecords && !yes; j++) {
		const proto_record *rec = m->reply.records[j];
		const char *by = proto_record_str(rec, "opened_by");
		uint64_t v;

		const char *role = proto_record_str(rec, "role");
		bool released = false;

		yes = (!strcmp(rec->kind, "ipc_export") && by && *by) ||
		      (proto_record_u64(rec, "ipc_shared", &v) && v) ||
		      /* a wake: its own shared VMM memory, released by the group, comes first */
		      (!strcmp(rec->kind, "app_share") && role && !strcmp(role, "export") &&
		       proto_record_bool(rec, "released", &released) && released);
	}
	return yes;
}

/* Does this member hold imports of the program's own shared VMM memory that a group sleep
 * released (a wake fetches them from their exporters, once those are awake)? */
static bool imports_released(const struct member *m)
{
	for (int j = 0; !m->rc && j < m->reply.nrecords; j++) {
		const proto_record *rec = m->reply.records[j];
		const char *role = proto_record_str(rec, "role");
		bool released = false;

		if (!strcmp(rec->kind, "app_share") && role && !strcmp(role, "import") &&
		    proto_record_bool(rec, "released", &released) && released)
			return true;
	}
	return false;
}

/* "PID,PID,..." of the members that sel selects. */
static void pid_list(const struct member *ms, int n, const bool *sel, char *out, size_t cap)
{
	size_t len = 0;

	out[0] = '\0';
	for (int i = 0; i < n && len < cap; i++)
		if (sel[i])
			len += (size_t)snprintf(out + len, cap - len, "%s%d", len ? "," : "",
						(int)ms[i].pid);
}

/* Ask the members of one phase; false when one of them failed (code and *again updated). */
static bool run_phase(struct member *ms, int n, const bool *phase, int *code, bool *again)
{
	bool failed = false;

	call_all(ms, n, phase);
	for (int i = 0; i < n; i++) {
		if (!phase[i])
			continue;
		if (answered(&ms[i], "ok")) {
			ms[i].changed = true;
		} else if (!answered(&ms[i], "already")) {
			failed = true;
			*again = *again && retryable(&ms[i]);
			if (!*code)
				*code = ms[i].rc;
		}
	}
	return !failed;
}

/* Who goes in which phase: exporters of shared memory sleep after and wake before the others. */
struct group_plan {
	int n;
	proto_verb verb;
	bool shares;                       /* some member exports memory another one opened */
	struct group_release rel;          /* the program's own shared VMM memory it releases */
	bool exporter[VMMCTL_MAX_GROUP];
	bool ipc_exporter[VMMCTL_MAX_GROUP]; /* exports legacy-IPC memory others opened */
	bool app_imports[VMMCTL_MAX_GROUP];  /* wake: holds imports a group sleep released */
	/* A member may be in both phases: one that exports and imports the program's own shared
	 * memory sleeps in the first (its imports go) and again in the second (its exports go,
	 * once every member has drained), and wakes its exports first, its imports second. */
	bool first[VMMCTL_MAX_GROUP], second[VMMCTL_MAX_GROUP];
	char all_pids[PROTO_SHARE_GROUP_MAX], importer_pids[PROTO_SHARE_GROUP_MAX];
};

/* Every member must be there before anything changes: 0, or the exit code (reported). */
static int find_members(const vmmctl_args *a, struct member *ms)
{
	int code;

	for (int i = 0; i < a->npids; i++) {
		ms[i].pid = a->pids[i];
		if ((code = client_find_socket(ms[i].pid, &ms[i].t, &ms[i].e))) {
			if (a->json)
				out_json_error(stdout, &ms[i].e);
			else
				fprintf(stderr, "vmmctl: %s; nothing was changed\n",
					out_safe(ms[i].e.message));
			return code;
		}
	}
	return 0;
}

/* Every member is asked for its status at once (one round trip for the group, not one per
 * member), within the group's deadline; who goes in which phase is decided from the answers. */
static void plan_phases(struct member *ms, struct group_plan *g, double deadline)
{
	double left = deadline - vmm_now_s();
	bool all[VMMCTL_MAX_GROUP];

	if (left > GROUP_SHARES_TIMEOUT_S)
		left = GROUP_SHARES_TIMEOUT_S;
	for (int i = 0; i < g->n; i++) {
		all[i] = true;
		ms[i].req = (proto_request){ .verb = PROTO_STATUS, .device = -1 };
		ms[i].timeout = left > 0.05 ? left : 0.05;
	}
	call_all(ms, g->n, all);
	for (int i = 0; i < g->n; i++) {
		g->shares = (g->exporter[i] = exports_shared(&ms[i])) || g->shares;
		g->ipc_exporter[i] = g->exporter[i];
		g->app_imports[i] = g->verb == PROTO_WAKE && imports_released(&ms[i]);
	}
	if (g->verb == PROTO_SLEEP) {
		const client_reply *r[VMMCTL_MAX_GROUP];

		for (int i = 0; i < g->n; i++)
			r[i] = ms[i].rc ? NULL : &ms[i].reply;
		group_release_plan(targets_of(ms, g->n), r, g->n, g->exporter, &g->rel);
		for (int i = 0; i < g->n; i++) {
			g->exporter[i] = g->exporter[i] || g->rel.exporter[i];
			g->shares = g->shares || g->rel.exporter[i];
		}
	}
	for (int i = 0; i < g->n; i++) {
		client_reply_free(&ms[i].reply);
		ms[i].rc = 0;
		memset(&ms[i].e, 0, sizeof(ms[i].e));
	}
	for (int i = 0; i < g->n; i++) {
		if (g->verb == PROTO_SLEEP) {
			g->first[i] = !g->shares || !g->ipc_exporter[i];
			g->second[i] = g->shares && g->exporter[i];
		} else {
			g->first[i] = !g->shares || g->exporter[i];
			g->second[i] = g->shares && (!g->exporter[i] || g->app_imports[i]);
		}
		g->exporter[i] = g->exporter[i] && g->shares;
	}
	pid_list(ms, g->n, all, g->all_pids, sizeof(g->all_pids));
}

/* Each member's request for this attempt. Importers release what they opened from any member;
 * exporters what only the importers (asleep by then) opened: set by narrow_exporters. */
static void prepare_requests(struct member *ms, const struct group_plan *g, const vmmctl_args *a,
			     double left, int drain_ms)
{
	for (int i = 0; i < g->n; i++) {
		ms[i].req = (proto_request){ .verb = g->verb, .device = -1,
					     .autowake = a->autowake,
					     .timeout_ms = server_ms(left) };
		if (g->verb == PROTO_SLEEP)
			ms[i].req.drain_ms = drain_ms < left * 1000 ? drain_ms : (int)(left * 1000) + 1;
		if (g->verb == PROTO_SLEEP && g->shares)
			snprintf(ms[i].req.share_group, sizeof(ms[i].req.share_group), "%s",
				 g->ipc_exporter[i] ? "" : g->all_pids);
		if (g->verb == PROTO_SLEEP && g->first[i])   /* exports: narrow_exporters */
			group_release_request(&g->rel, i, targets_of(ms, g->n), false,
					      ms[i].req.app_release, sizeof(ms[i].req.app_release));
		/* Exports first: the imports wait for the second phase, device work held. */
		ms[i].req.app_defer = g->verb == PROTO_WAKE && g->first[i] && g->second[i];
		ms[i].timeout = left;
		ms[i].changed = ms[i].undone = false;
		ms[i].earlier_released = ms[i].earlier_copied = ms[i].earlier_imported = 0;
	}
}

/* Which of the program's own shared memories the first phase's members released (their
 * statuses, asked at once): the exporters release only those. */
static void confirm_app_releases(struct member *ms, struct group_plan *g, const bool *slept)
{
	static client_reply r[VMMCTL_MAX_GROUP];
	const client_reply *rp[VMMCTL_MAX_GROUP];
	bool answered[VMMCTL_MAX_GROUP];

	memset(r, 0, sizeof(r));
	group_shares_status(targets_of(ms, g->n), g->n, slept, GROUP_SHARES_TIMEOUT_S, r,
			    answered);
	for (int i = 0; i < g->n; i++)
		rp[i] = slept[i] && answered[i] ? &r[i] : NULL;
	group_release_confirm(&g->rel, rp, g->n);
	for (int i = 0; i < g->n; i++)
		client_reply_free(&r[i]);
}

/* Only the importers this attempt put to sleep have let the memory go (one that was asleep
 * already answered "already" and kept its mappings): the exporters release only that. */
static void narrow_exporters(struct member *ms, struct group_plan *g)
{
	bool slept[VMMCTL_MAX_GROUP];

	for (int i = 0; i < g->n; i++)
		slept[i] = g->first[i] && ms[i].changed;
	pid_list(ms, g->n, slept, g->importer_pids, sizeof(g->importer_pids));
	if (g->rel.nmem)
		confirm_app_releases(ms, g, slept);
	for (int i = 0; i < g->n; i++) {
		if (!g->second[i])
			continue;
		snprintf(ms[i].req.share_group, sizeof(ms[i].req.share_group), "%s",
			 g->importer_pids);
		group_release_request(&g->rel, i, targets_of(ms, g->n), true,
				      ms[i].req.app_release, sizeof(ms[i].req.app_release));
	}
}

/* Both phases; on a failure everything done is put back, the second phase first (exporters
 * wake before their importers, importers go back to sleep before their exporters). true: done;
 * *again: a retry could help (a drain that timed out, every undo done). */
static bool one_attempt(struct member *ms, struct group_plan *g, const vmmctl_args *a,
			double deadline, int *code, bool *again, struct group_steps *st)
{
	double t = vmm_now_s();
	bool failed;

	*again = true;
	failed = !run_phase(ms, g->n, g->first, code, again);
	if (!failed && g->shares && g->verb == PROTO_SLEEP)
		narrow_exporters(ms, g);
	for (int i = 0; i < g->n; i++) {
		const proto_record *res = ms[i].rc ? NULL : client_reply_find(&ms[i].reply, "result");

		ms[i].req.app_defer = false;   /* a second wake brings the imports back */
		if (g->first[i] && g->second[i] && res) {   /* its second reply replaces this one */
			proto_record_u64(res, "released", &ms[i].earlier_released);
			proto_record_u64(res, "copied", &ms[i].earlier_copied);
			proto_record_u64(res, "imported", &ms[i].earlier_imported);
		}
	}
	failed = failed || !run_phase(ms, g->n, g->second, code, again);
	st->phases += vmm_now_s() - t;
	if (!failed)
		return true;
	t = vmm_now_s();
	undo(ms, g->n, g->first, g->second, g->verb, a->autowake, deadline);
	check_undone(ms, g->n, g->verb);
	st->undo += vmm_now_s() - t;
	for (int i = 0; i < g->n; i++)
		*again = *again && !ms[i].undo_failed;
	return false;
}

/* The shares report after a sleep, rendered now so that its time is measured apart. */
static char *render_shared(const struct member *ms, int n, const struct group_steps *st,
			   bool json)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	group_shares_report(targets_of(ms, n), n, GROUP_SHARES_TIMEOUT_S, st->kept, st->nkept,
			    json, f);
	if (fclose(f)) {
		free(text);
		return NULL;
	}
	return text;
}

int group_run(const vmmctl_args *a)
{
	static struct member ms[VMMCTL_MAX_GROUP];
	static struct group_plan g;
	double t0 = vmm_now_s(), deadline = t0 + (a->timeout > 0 ? a->timeout : GROUP_DEFAULT_TIMEOUT);
	double t, secs;
	int attempts = 0, code, drain_ms = GROUP_DRAIN_FIRST_MS;
	const char *what = a->cmd == CMD_SLEEP ? "sleep" : "wake";
	static struct group_steps st;
	char *shared = NULL;
	bool ok = false, again;

	memset(ms, 0, sizeof(ms));
	memset(&g, 0, sizeof(g));
	memset(&st, 0, sizeof(st));
	g.n = a->npids;
	g.verb = a->cmd == CMD_SLEEP ? PROTO_SLEEP : PROTO_WAKE;
	if ((code = find_members(a, ms)))
		return code;
	st.find = (t = vmm_now_s()) - t0;
	plan_phases(ms, &g, deadline);
	st.plan = vmm_now_s() - t;
	for (;;) {
		double left = deadline - vmm_now_s();

		attempts++;
		prepare_requests(ms, &g, a, left, drain_ms);
		if ((ok = one_attempt(ms, &g, a, deadline, &code, &again, &st))) {
			code = EXIT_OK;
			break;
		}
		/* Retry only a sleep that could not drain, while the deadline leaves room. */
		left = deadline - vmm_now_s();
		if (g.verb != PROTO_SLEEP || !again || left < 2 * drain_ms / 1000.0 + 0.5)
			break;
		code = EXIT_OK;
		drain_ms = drain_ms * 2 > GROUP_DRAIN_MAX_MS ? GROUP_DRAIN_MAX_MS : drain_ms * 2;
		t = vmm_now_s();
		nanosleep(&(struct timespec){ 0, 50 * 1000000L * (attempts < 10 ? attempts : 10) },
			  NULL);
		st.pauses += vmm_now_s() - t;
	}
	secs = vmm_now_s() - t0;
	if (ok && g.verb == PROTO_SLEEP) {
		t = vmm_now_s();
		for (int i = 0; i < g.rel.nmem; i++)
			if (g.rel.mem[i].over)
				st.kept[st.nkept++] = (struct share_kept){
					.exporter = ms[g.rel.mem[i].exporter].pid,
					.handle = g.rel.mem[i].handle };
		st.shared = shared = render_shared(ms, g.n, &st, a->json);
		st.report = vmm_now_s() - t;
	}
	if (a->json)
		print_json(ms, g.n, what, ok, attempts, secs, &st);
	else
		print_text(ms, g.n, what, ok, attempts, secs, &st);
	free(shared);
	for (int i = 0; i < g.n; i++)
		client_reply_free(&ms[i].reply);
	return ok ? EXIT_OK : code ? code : EXIT_REPORTED;
}
