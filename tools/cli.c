/* vmmctl's argument parsing: options may come before or after the command. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cli_usage(FILE *f)
{
	fputs("usage: vmmctl [--json] [--timeout SECONDS] COMMAND [ARGS]\n"
	      "\n"
	      "Drive processes running under vmmshim (LD_PRELOAD=libvmmshim.so).\n"
	      "\n"
	      "commands:\n"
	      "  list [--watch [--interval S] [--count N]]\n"
	      "      shimmed processes you may drive: pid, state, memory, devices, command\n"
	      "      (--json: one document; with --watch one per line, a refresh each)\n"
	      "  metrics [--output FILE] [--label NAME=VALUE]... [--watch ...]\n"
	      "      Prometheus text exposition of every process list shows: memory per\n"
	      "      device and tag, sleep/wake counters, progress; --output writes FILE\n"
	      "      atomically (for node-exporter's textfile collector); --label adds a\n"
	      "      label to every sample (pod=..., job=...: pids repeat across containers)\n"
	      "  status PID [--tag T] [--device N]\n"
	      "      memory per device and tag: live, mapped, cached, asleep, host backup,\n"
	      "      and device memory the shim does not manage\n"
	      "  sleep PID [--tag T] [--device N] [--discard] [--autowake] [--progress]\n"
	      "      copy device memory to host (or drop it: --discard) and give it back to\n"
	      "      the driver; addresses stay valid and the program's device work waits\n"
	      "      until wake (--autowake: its next device call wakes it)\n"
	      "  wake PID [--tag T] [--device N] [--progress]\n"
	      "      re-create the memory at the same addresses and copy it back (a sleep in\n"
	      "      progress that this wake covers is cancelled first)\n"
	      "  sleep PID PID... [--autowake] | wake PID PID...\n"
	      "      one operation on a group (e.g. the ranks of a job): all of them or none;\n"
	      "      retried while a collective holds one member's drain, within --timeout\n"
	      "  cancel PID\n"
	      "      stop the sleep or wake in progress: it rolls back; waits until it has\n"
	      "      ended\n"
	      "  run [--cycle S [--discard TAG] [--seed N]] [--report FILE] -- PROGRAM [ARGS]\n"
	      "      start PROGRAM under the shim and exit with its status; --cycle S sleeps\n"
	      "      and wakes it at random moments about every S seconds and reports the\n"
	      "      cycles at exit (vmmctl run --help)\n"
	      "  help, version\n"
	      "\n"
	      "options:\n"
	      "  --json          machine-readable output on stdout\n"
	      "  --timeout S     give up after S seconds, connecting included (default: 10 for\n"
	      "                  status, 3 per process for list, 30 for cancel; sleep and wake\n"
	      "                  wait as long as the process's own deadline). A sleep or wake\n"
	      "                  whose vmmctl gives up or is interrupted is cancelled: the\n"
	      "                  process rolls it back\n"
	      "  --tag T         only memory allocated under tag T (vmmshim_set_tag)\n"
	      "  --device N      only device N\n"
	      "  --progress      sleep/wake: bytes copied, GB/s and time left on stderr\n"
	      "                  (shown on a terminal anyway; lines when not a terminal)\n"
	      "  --watch         list/metrics/status: refresh every --interval S (default 2,\n"
	      "                  0.2..3600) until interrupted or --count N refreshes\n"
	      "\n"
	      "exit codes: 0 done (or already so; cancel: rolled back or nothing to cancel),\n"
	      "  1 the process reported an error (cancel: the operation had finished), 2 usage,\n"
	      "  3 no such process, it ended, or it has no control socket, 4 permission denied\n"
	      "  or an untrusted socket, 5 timeout\n"
	      "\n"
	      "Sockets are looked for in $VMMSHIM_RUN_DIR, $XDG_RUNTIME_DIR/vmmshim or\n"
	      "/tmp/vmmshim-UID (and in the folder the target's own environment names).\n",
	      f);
}

static int fail(char *why, size_t whylen, const char *msg, const char *arg)
{
	snprintf(why, whylen, "%s%s%s", msg, arg ? ": " : "", arg ? arg : "");
	return -1;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* A Prometheus label: NAME=VALUE with NAME [a-zA-Z_][a-zA-Z0-9_]*, not reserved (__*) and not
 * one vmmctl sets itself; VALUE any printable ASCII (escaped when written). */
static bool valid_label(const char *s)
{
	static const char *const ours[] = { "pid", "backend", "device", "tag", "operation",
					    "phase", "direction", "command", "version", "state",
					    "held" };
	const char *eq = strchr(s, '=');
	size_t n = eq ? (size_t)(eq - s) : 0;

	if (!n || n > 64 || (s[0] >= '0' && s[0] <= '9') || !strncmp(s, "__", 2))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (strlen(ours[i]) == n && !strncmp(s, ours[i], n))
			return false;
	for (const char *v = eq + 1; *v; v++)
		if ((unsigned char)*v < 0x20 || (unsigned char)*v > 0x7e)
			return false;
	return strlen(eq + 1) <= 256;
}

static bool takes(vmmctl_cmd c, const char *opt)
{
	if (!strcmp(opt, "--tag") || !strcmp(opt, "--device"))
		return c == CMD_STATUS || c == CMD_SLEEP || c == CMD_WAKE;
	if (!strcmp(opt, "--discard") || !strcmp(opt, "--autowake"))
		return c == CMD_SLEEP;
	if (!strcmp(opt, "--progress"))
		return c == CMD_SLEEP || c == CMD_WAKE;
	if (!strcmp(opt, "--watch"))
		return c == CMD_LIST || c == CMD_METRICS || c == CMD_STATUS;
	if (!strcmp(opt, "--output") || !strcmp(opt, "--label"))
		return c == CMD_METRICS;
	return true;
}

/* The options given, for the checks that need the command. */
struct seen {
	bool tag, dev, discard, autowake, progress, output, every;
};

/* A flag (an option without a value): 1 when opt is one and was set, 0 when it is not one. */
static int set_flag(const char *opt, vmmctl_args *out, struct seen *s)
{
	if (!strcmp(opt, "--json"))
		out->json = true;
	else if (!strcmp(opt, "--discard"))
		s->discard = out->discard = true;
	else if (!strcmp(opt, "--autowake"))
		s->autowake = out->autowake = true;
	else if (!strcmp(opt, "--progress"))
		s->progress = out->progress = true;
	else if (!strcmp(opt, "--watch"))
		out->watch = true;
	else
		return 0;
	return 1;
}

static int opt_label(const char *val, vmmctl_args *out, struct seen *s, char *why, size_t whylen)
{
	if (out->nlabels == CLI_MAX_LABELS)
		return fail(why, whylen, "at most 8 --label", val);
	if (!valid_label(val))
		return fail(why, whylen, "--label wants NAME=VALUE, NAME of letters, digits and _ "
			    "(not starting with a digit or __), not pid, backend, device, tag, "
			    "operation, phase or direction", val);
	out->labels[out->nlabels++] = val;
	s->output = true;
	return 0;
}

static int opt_output(const char *val, vmmctl_args *out, struct seen *s, char *why,
		      size_t whylen)
{
	if (!val[0])
		return fail(why, whylen, "--output wants a file name", NULL);
	out->output = val;
	s->output = true;
	return 0;
}

static int opt_interval(const char *val, vmmctl_args *out, struct seen *s, char *why,
			size_t whylen)
{
	char *end;
	double t = strtod(val, &end);

	if (!*val || *end || !(t >= 0.2) || t > 3600)
		return fail(why, whylen, "--interval wants seconds (0.2 <= S <= 3600)", val);
	out->interval = t;
	s->every = true;
	return 0;
}

static int opt_count(const char *val, vmmctl_args *out, struct seen *s, char *why, size_t whylen)
{
	if (!parse_long(val, 1, 1000000000L, &out->count))
		return fail(why, whylen, "--count wants 1 or more", val);
	s->every = true;
	return 0;
}

static int opt_tag(const char *val, vmmctl_args *out, struct seen *s, char *why, size_t whylen)
{
	size_t n = strlen(val);

	if (n == 0 || n >= PROTO_TAG_MAX)
		return fail(why, whylen, "a tag has 1 to 31 bytes", val);
	for (size_t k = 0; k < n; k++)
		if ((unsigned char)val[k] < 0x20 || (unsigned char)val[k] > 0x7e)
			return fail(why, whylen, "a tag is printable ASCII", val);
	memcpy(out->tag, val, n + 1);
	s->tag = true;
	return 0;
}

static int opt_device(const char *val, vmmctl_args *out, struct seen *s, char *why,
		      size_t whylen)
{
	long d;

	if (!parse_long(val, 0, PROTO_MAX_DEVICE, &d))
		return fail(why, whylen, "--device wants 0..15", val);
	out->device = (int)d;
	s->dev = true;
	return 0;
}

static int opt_timeout(const char *val, vmmctl_args *out, struct seen *s, char *why,
		       size_t whylen)
{
	char *end;
	double t = strtod(val, &end);

	(void)s;
	if (!*val || *end || !(t > 0) || t > 86400)
		return fail(why, whylen, "--timeout wants seconds (0 < S <= 86400)", val);
	out->timeout = t;
	return 0;
}

typedef int (*value_fn)(const char *val, vmmctl_args *out, struct seen *s, char *why,
			size_t whylen);
static const struct {
	const char *name;
	value_fn set;
} value_opts[] = {
	{ "--tag", opt_tag },		{ "--device", opt_device }, { "--timeout", opt_timeout },
	{ "--output", opt_output },	{ "--label", opt_label },   { "--interval", opt_interval },
	{ "--count", opt_count },
};

static value_fn value_option(const char *opt)
{
	for (size_t k = 0; k < sizeof(value_opts) / sizeof(value_opts[0]); k++)
		if (!strcmp(opt, value_opts[k].name))
			return value_opts[k].set;
	return NULL;
}

/* Options that go only with some commands. */
static int check_options(const vmmctl_args *out, const struct seen *s, char *why, size_t whylen)
{
	if ((s->tag && !takes(out->cmd, "--tag")) || (s->dev && !takes(out->cmd, "--device")))
		return fail(why, whylen, "--tag and --device go with status, sleep and wake", NULL);
	if ((s->discard || s->autowake) && !takes(out->cmd, "--discard"))
		return fail(why, whylen, "--discard and --autowake go with sleep", NULL);
	if (s->progress && !takes(out->cmd, "--progress"))
		return fail(why, whylen, "--progress goes with sleep and wake", NULL);
	if (out->watch && !takes(out->cmd, "--watch"))
		return fail(why, whylen, "--watch goes with list, metrics and status", NULL);
	if (s->every && !out->watch)
		return fail(why, whylen, "--interval and --count go with --watch", NULL);
	if (s->output && !takes(out->cmd, "--output"))
		return fail(why, whylen, "--output and --label go with metrics", NULL);
	return 0;
}

static int find_command(const char *word, vmmctl_args *out, char *why, size_t whylen)
{
	static const struct { const char *name; vmmctl_cmd cmd; } cmds[] = {
		{ "help", CMD_HELP }, { "version", CMD_VERSION }, { "list", CMD_LIST },
		{ "status", CMD_STATUS }, { "sleep", CMD_SLEEP }, { "wake", CMD_WAKE },
		{ "cancel", CMD_CANCEL }, { "metrics", CMD_METRICS },
	};

	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
		if (!strcmp(word, cmds[k].name)) {
			out->cmd = cmds[k].cmd;
			return 0;
		}
	}
	return fail(why, whylen, "unknown command", word);
}

/* The PIDs after a command that names processes (one, or several for a group sleep/wake). */
static int parse_pids(const char *const *words, int nwords, vmmctl_args *out,
		      const struct seen *s, char *why, size_t whylen)
{
	bool group = out->cmd == CMD_SLEEP || out->cmd == CMD_WAKE;

	if (nwords < 2)
		return fail(why, whylen, "which process? (give its PID)", NULL);
	if (nwords > 2 && !group)
		return fail(why, whylen, "too many arguments", words[2]);
	for (int k = 1; k < nwords; k++) {
		long pid;

		if (!parse_long(words[k], 1, 0x7fffffff, &pid))
			return fail(why, whylen, "not a process id", words[k]);
		for (int j = 0; j < out->npids; j++)
			if (out->pids[j] == (pid_t)pid)
				return fail(why, whylen, "a process is named twice", words[k]);
		out->pids[out->npids++] = (pid_t)pid;
	}
	out->pid = out->pids[0];
	if (out->npids > 1 && (s->tag || s->dev || s->discard))
		return fail(why, whylen, "a group sleep or wake covers whole processes (no --tag, "
			    "--device or --discard)", NULL);
	return 0;
}

/* Words and options in any order; -h/--help and --version answer at once. */
static int parse_args(int argc, char **argv, const char **words, int *nwords, vmmctl_args *out,
		      struct seen *s, char *why, size_t whylen)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *val;
		char opt[32];
		value_fn set;

		if (a[0] != '-' || !strcmp(a, "-")) {
			if (*nwords == VMMCTL_MAX_GROUP + 1)
				return fail(why, whylen, "too many arguments", a);
			words[(*nwords)++] = a;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "--version")) {
			out->cmd = strcmp(a, "--version") ? CMD_HELP : CMD_VERSION;
			return 1;
		}
		/* --opt=value and --opt value */
		snprintf(opt, sizeof(opt), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
		if (set_flag(opt, out, s)) {
			if (eq)
				return fail(why, whylen, "option takes no value", a);
			continue;
		}
		if (!(set = value_option(opt)))
			return fail(why, whylen, "unknown option", a);
		if (eq)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else
			return fail(why, whylen, "option needs a value", a);
		if (set(val, out, s, why, whylen))
			return -1;
	}
	return 0;
}

int cli_parse(int argc, char **argv, vmmctl_args *out, char *why, size_t whylen)
{
	const char *words[VMMCTL_MAX_GROUP + 1];
	struct seen s = { 0 };
	int nwords = 0, r;

	memset(out, 0, sizeof(*out));
	out->device = -1;
	out->cmd = CMD_HELP;
	if ((r = parse_args(argc, argv, words, &nwords, out, &s, why, whylen)))
		return r > 0 ? 0 : -1;
	if (nwords == 0)
		return fail(why, whylen, "no command (try vmmctl --help)", NULL);
	if (find_command(words[0], out, why, whylen) || check_options(out, &s, why, whylen))
		return -1;
	if (out->interval <= 0)
		out->interval = 2.0;
	if (out->cmd == CMD_STATUS || out->cmd == CMD_SLEEP || out->cmd == CMD_WAKE ||
	    out->cmd == CMD_CANCEL)
		return parse_pids(words, nwords, out, &s, why, whylen);
	if (nwords != 1)
		return fail(why, whylen, "too many arguments", words[1]);
	return 0;
}
