/* vmmctl run --cycle: sleeps and wakes the program at random moments, through the same client
 * calls as `vmmctl sleep` and `vmmctl wake`, and keeps the figures for the report.
 *
 * A cycle: awake for a random time in [cycle/2, 3*cycle/2), then a whole-process sleep (the
 * --discard tags first, dropped; everything else copied), asleep for a random time in
 * [0, cycle/4], then a wake. A moment when the shim manages no device memory in the program yet
 * (no control socket, or no heap) or it is asleep by someone else's doing is skipped. A wake that
 * fails is retried until --timeout has passed since the first try. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "../core/mono_wait.h"
#include "client.h"
#include "output.h"
#include "run.h"

#define WAKE_RETRY_S 0.25
#define STOPPED_DUE_S 3600.0

/* splitmix64: a small generator whose sequence a seed fixes. */
static double random_unit(run_cycler *c)
{
	uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / (double)(1ull << 53);
}

static double awake_time(run_cycler *c)
{
	return c->o->cycle * (0.5 + random_unit(c));
}

static double asleep_time(run_cycler *c)
{
	return c->o->cycle * 0.25 * random_unit(c);
}

static void note_error(run_cycler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note_error(run_cycler *c, const char *fmt, ...)
{
	va_list ap;

	c->failures++;
	if (c->nerrors == RUN_MAX_ERRORS)
		return;
	va_start(ap, fmt);
	vsnprintf(c->errors[c->nerrors++], sizeof(c->errors[0]), fmt, ap);
	va_end(ap);
}

/* Whether the program has ended (it stays waitable for run.c: WNOWAIT). */
static bool program_ended(pid_t pid)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT))
		return errno == ECHILD; /* reaped already: vmmctl run saw it exit */
	return si.si_pid == pid;
}

static void series_add(run_series *s, double seconds, uint64_t released, uint64_t copied)
{
	if (s->n == s->cap) {
		int cap = s->cap ? s->cap * 2 : 64;
		double *ns = realloc(s->seconds, sizeof(*ns) * (size_t)cap);

		if (!ns)
			return; /* the figures of this cycle are lost, the cycle is still counted */
		s->seconds = ns;
		s->cap = cap;
	}
	s->seconds[s->n++] = seconds;
	s->released += released;
	s->copied += copied;
}

/* The outcome of one request. */
enum outcome { DONE, ALREADY, NO_SOCKET, FAILED };

struct transfer {
	double seconds;
	uint64_t released, copied;
};

static enum outcome request(run_cycler *c, proto_verb verb, const char *tag, bool discard,
			    struct transfer *sum, client_error *e)
{
	proto_request req = { .verb = verb, .device = -1, .discard = discard };
	client_reply reply;
	client_target t;
	const proto_record *res;
	int rc;

	memset(e, 0, sizeof(*e));
	if (tag)
		snprintf(req.tag, sizeof(req.tag), "%s", tag);
	if (client_find_socket(c->pid, &t, e))
		return NO_SOCKET;
	rc = client_call(&t, &req, c->o->timeout, false, false, &reply, e);
	if (!rc)
		rc = client_reply_error(&reply, e);
	if (rc) {
		client_reply_free(&reply);
		/* Its heap is not there yet: nothing to sleep, the same as no socket. */
		return !strcmp(e->status, PROTO_ERR_NOT_READY) ? NO_SOCKET : FAILED;
	}
	if (reply.word && !strcmp(reply.word, "already")) {
		client_reply_free(&reply);
		return ALREADY;
	}
	if ((res = client_reply_find(&reply, "result"))) {
		uint64_t v = 0;
		double s = 0;

		if (proto_record_double(res, "seconds", &s))
			sum->seconds += s;
		if (proto_record_u64(res, "released", &v))
			sum->released += v;
		if (proto_record_u64(res, "copied", &v))
			sum->copied += v;
	}
	client_reply_free(&reply);
	return DONE;
}

/* How many bytes the shim manages in the program (resident or asleep), from a hello request: a
 * heap that exists but holds nothing has nothing to sleep either (a sleep before the heap exists
 * is answered not_ready: request()). */
static enum outcome managed_bytes(run_cycler *c, uint64_t *managed, client_error *e)
{
	proto_request req = { .verb = PROTO_HELLO, .device = -1 };
	client_reply reply;
	const proto_record *info;
	client_target t;
	int rc;

	*managed = 0;
	memset(e, 0, sizeof(*e));
	if (client_find_socket(c->pid, &t, e))
		return NO_SOCKET;
	rc = client_call(&t, &req, c->o->timeout, false, false, &reply, e);
	if (!rc)
		rc = client_reply_error(&reply, e);
	if (!rc && (info = client_reply_find(&reply, "info")))
		proto_record_u64(info, "managed", managed);
	client_reply_free(&reply);
	return rc ? FAILED : DONE;
}

void run_cycler_init(run_cycler *c, const run_opts *o, pid_t pid, double now)
{
	memset(c, 0, sizeof(*c));
	c->o = o;
	c->pid = pid;
	c->rng = o->seed;
	c->state = o->cycle > 0 ? RUN_AWAKE : RUN_STOPPED;
	c->next_at = c->state == RUN_AWAKE ? now + awake_time(c) : now + STOPPED_DUE_S;
}

/* A request failed: the program's end explains it, else it is a failure. */
static bool ended_meanwhile(run_cycler *c)
{
	if (!program_ended(c->pid))
		return false;
	c->state = RUN_STOPPED;
	return true;
}

/* A request answered "busy": a process that is exiting says so (server.c) before it has ended;
 * give it 2 s to end, so that a program's normal exit is not taken for a failed cycle. */
static bool ended_soon(run_cycler *c, const client_error *e)
{
	const struct timespec step = { 0, 20 * 1000 * 1000 };

	if (strcmp(e->status, PROTO_ERR_BUSY))
		return false;
	for (int i = 0; i < 100; i++) {
		if (ended_meanwhile(c))
			return true;
		nanosleep(&step, NULL);
	}
	return false;
}

static void do_sleep(run_cycler *c, double now)
{
	struct transfer t = { 0 };
	client_error e;
	bool ours = false;
	uint64_t managed;
	enum outcome r = managed_bytes(c, &managed, &e);

	if (r == DONE && !managed)
		r = NO_SOCKET; /* nothing to sleep yet: the same as no socket */
	for (int i = 0; i < c->o->ndiscard && r != NO_SOCKET && r != FAILED; i++) {
		r = request(c, PROTO_SLEEP, c->o->discard[i], true, &t, &e);
		ours = ours || r == DONE;
	}
	if (r != NO_SOCKET && r != FAILED) {
		r = request(c, PROTO_SLEEP, NULL, false, &t, &e);
		ours = ours || r == DONE;
	}
	if (r == NO_SOCKET && !ours) {
		if (!ended_meanwhile(c))
			c->skipped++;
		c->next_at = now + awake_time(c);
		return;
	}
	if (r == FAILED || r == NO_SOCKET) {
		struct transfer ignored = { 0 };
		client_error e2;

		if (ended_meanwhile(c) || ended_soon(c, &e))
			return;
		note_error(c, "sleep: %s", out_safe(e.message)); /* the process's words: escaped */
		/* The discard tags already asleep come back (their contents are gone either way). */
		if (ours && request(c, PROTO_WAKE, NULL, false, &ignored, &e2) == FAILED &&
		    !ended_meanwhile(c)) {
			note_error(c, "wake after a failed sleep: %s", e2.message);
			c->state = RUN_ASLEEP;
			c->wake_deadline = vmm_now_s() + c->o->timeout;
			c->next_at = vmm_now_s() + WAKE_RETRY_S;
			return;
		}
		c->next_at = vmm_now_s() + awake_time(c);
		return;
	}
	if (!ours) { /* asleep already: someone else's sleep, theirs to end */
		c->skipped++;
		c->next_at = now + awake_time(c);
		return;
	}
	series_add(&c->sleeps, t.seconds, t.released, t.copied);
	c->state = RUN_ASLEEP;
	c->wake_deadline = 0;
	c->next_at = vmm_now_s() + asleep_time(c);
}

static void do_wake(run_cycler *c)
{
	struct transfer t = { 0 };
	client_error e;
	enum outcome r = request(c, PROTO_WAKE, NULL, false, &t, &e);
	double now = vmm_now_s();

	if (r == DONE || r == ALREADY) {
		series_add(&c->wakes, t.seconds, t.released, t.copied);
		c->cycles++;
		c->state = RUN_AWAKE;
		c->next_at = now + awake_time(c);
		return;
	}
	if (ended_meanwhile(c))
		return;
	if (!c->wake_deadline)
		c->wake_deadline = now + c->o->timeout;
	if (now >= c->wake_deadline) {
		note_error(c, "wake: %s (gave up after %.3g s of retries)", out_safe(e.message),
			   c->o->timeout);
		c->state = RUN_STUCK;
		return;
	}
	c->next_at = now + WAKE_RETRY_S;
}

void run_cycler_tick(run_cycler *c, double now)
{
	if (now < c->next_at)
		return;
	if (c->state == RUN_AWAKE)
		do_sleep(c, now);
	else if (c->state == RUN_ASLEEP)
		do_wake(c);
}

double run_cycler_due_in(const run_cycler *c, double now)
{
	if (c->state != RUN_AWAKE && c->state != RUN_ASLEEP)
		return STOPPED_DUE_S;
	return c->next_at > now ? c->next_at - now : 0;
}

void run_cycler_stop(run_cycler *c, double now)
{
	/* Asleep by our doing: wake it now (not at the planned moment), retrying as a scheduled
	 * wake would until --timeout. */
	c->next_at = now;
	while (c->state == RUN_ASLEEP) {
		double t = vmm_now_s();

		if (t < c->next_at) {
			struct timespec ts = { 0, (long)((c->next_at - t) * 1e9) };

			nanosleep(&ts, NULL);
		}
		do_wake(c);
	}
	if (c->state == RUN_AWAKE)
		c->state = RUN_STOPPED;
}

void run_cycler_free(run_cycler *c)
{
	free(c->sleeps.seconds);
	free(c->wakes.seconds);
	c->sleeps.seconds = c->wakes.seconds = NULL;
}

static const char *human_bytes(uint64_t v, char *buf, size_t cap)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double x = (double)v;
	int u = 0;

	while (x >= 1024 && u < 4) {
		x /= 1024;
		u++;
	}
	snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", x, units[u]);
	return buf;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

struct spread {
	double min, median, max, total;
};

static struct spread spread_of(const run_series *s)
{
	struct spread r = { 0 };
	double *v;

	if (!s->n)
		return r;
	v = malloc(sizeof(*v) * (size_t)s->n);
	if (!v)
		return r;
	memcpy(v, s->seconds, sizeof(*v) * (size_t)s->n);
	qsort(v, (size_t)s->n, sizeof(*v), cmp_double);
	r.min = v[0];
	r.max = v[s->n - 1];
	r.median = s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
	for (int i = 0; i < s->n; i++)
		r.total += v[i];
	free(v);
	return r;
}

static void report_series(FILE *f, const char *name, const char *verb, const run_series *s)
{
	struct spread sp = spread_of(s);
	char b1[32], b2[32];

	if (!s->n)
		return;
	fprintf(f, "vmmctl run:   %-5s %s %s, copied %s in all; %.1f ms median per cycle (min %.1f, "
		"max %.1f)\n", name, verb, human_bytes(s->released, b1, sizeof(b1)),
		human_bytes(s->copied, b2, sizeof(b2)), sp.median * 1e3, sp.min * 1e3,
		sp.max * 1e3);
}

void run_cycler_report(const run_cycler *c, FILE *f)
{
	fprintf(f, "vmmctl run: %d sleep/wake cycle%s (--cycle %g, --seed %llu)\n", c->cycles,
		c->cycles == 1 ? "" : "s", c->o->cycle, (unsigned long long)c->o->seed);
	report_series(f, "sleep", "released", &c->sleeps);
	report_series(f, "wake", "re-created", &c->wakes);
	if (c->skipped)
		fprintf(f, "vmmctl run:   %d moment%s skipped (no device memory allocated yet, or "
			"asleep by another's sleep)\n", c->skipped, c->skipped == 1 ? "" : "s");
	for (int i = 0; i < c->nerrors; i++)
		fprintf(f, "vmmctl run:   failed: %s\n", c->errors[i]);
	if (c->failures > c->nerrors)
		fprintf(f, "vmmctl run:   and %d more failures\n", c->failures - c->nerrors);
	if (c->state == RUN_STUCK)
		fprintf(f, "vmmctl run:   the program could not be woken\n");
}

void run_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_series(FILE *f, const char *name, const run_series *s)
{
	struct spread sp = spread_of(s);

	fprintf(f, "\"%s\": {\"count\": %d, \"released\": %llu, \"copied\": %llu, "
		"\"seconds_total\": %.6f, \"seconds_min\": %.6f, \"seconds_median\": %.6f, "
		"\"seconds_max\": %.6f}", name, s->n, (unsigned long long)s->released,
		(unsigned long long)s->copied, sp.total, sp.min, sp.median, sp.max);
}

void run_cycler_json(const run_cycler *c, FILE *f)
{
	fprintf(f, "\"cycle_s\": %.6f, \"seed\": %llu, \"cycles\": %d, \"skipped\": %d, "
		"\"failures\": %d, \"stuck_asleep\": %s, ", c->o->cycle,
		(unsigned long long)c->o->seed, c->cycles, c->skipped, c->failures,
		c->state == RUN_STUCK ? "true" : "false");
	json_series(f, "sleep", &c->sleeps);
	fputs(", ", f);
	json_series(f, "wake", &c->wakes);
	fputs(", \"discard\": [", f);
	for (int i = 0; i < c->o->ndiscard; i++) {
		fputs(i ? ", " : "", f);
		run_json_string(f, c->o->discard[i]);
	}
	fputs("], \"errors\": [", f);
	for (int i = 0; i < c->nerrors; i++) {
		fputs(i ? ", " : "", f);
		run_json_string(f, c->errors[i]);
	}
	fputc(']', f);
}
