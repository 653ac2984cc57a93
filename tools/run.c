/* vmmctl run [OPTIONS] [--] PROGRAM [ARGS]: starts PROGRAM with libvmmshim.so preloaded, the way
 * compute-sanitizer or nsys launch theirs, and exits with its status (128+N when a signal N ended
 * it). The library is VMMSHIM_LIBRARY, else the one installed beside vmmctl (the libdir of the
 * same install, or a lib folder beside bin/), else the build tree's (build/tools/vmmctl ->
 * build/shim/libvmmshim.so). With --cycle, run_cycle.c sleeps and wakes the program meanwhile. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/mono_wait.h"
#include "cli.h"
#include "run.h"

#ifndef VMMCTL_RUN_LIBDIR
#define VMMCTL_RUN_LIBDIR "../lib"
#endif

#define LIB_NAME "libvmmshim.so"
#define DEFAULT_TIMEOUT_S 120.0
#define POLL_S 0.01

/* Exit statuses of our own (the program's are passed on). */
enum {
	RUN_EXIT_FAILED = 125,     /* vmmctl run could not do what was asked (the program had
				    * succeeded, or never started) */
	RUN_EXIT_NOEXEC = 126,     /* the program was found but could not be executed */
	RUN_EXIT_NOTFOUND = 127,   /* no such program */
};

static volatile sig_atomic_t pending_signal;
static volatile sig_atomic_t pending_from_user;

static void on_signal(int sig, siginfo_t *si, void *ctx)
{
	(void)ctx;
	pending_signal = sig;
	/* SIGINT/SIGQUIT from the terminal reach the program too (same process group); sent with
	 * kill(), they reached only us and are passed on. */
	pending_from_user = si && si->si_code <= 0;
}

static void run_usage(FILE *f)
{
	fputs("usage: vmmctl run [--cycle SECONDS [--discard TAG]... [--seed N] [--min-cycles N]]\n"
	      "                  [--timeout SECONDS] [--report FILE] [--] PROGRAM [ARGS...]\n"
	      "\n"
	      "Runs PROGRAM with libvmmshim.so preloaded and exits with its status (128+N when\n"
	      "signal N ended it). The library: $VMMSHIM_LIBRARY, else the one installed beside\n"
	      "vmmctl, else the build tree's.\n"
	      "\n"
	      "  --cycle S       sleep and wake the program at random moments: awake for S/2..3S/2,\n"
	      "                  asleep for 0..S/4, again and again; a report on stderr at exit\n"
	      "  --discard TAG   at each sleep drop TAG's contents instead of copying them\n"
	      "                  (repeatable; the program must not rely on them after a wake)\n"
	      "  --seed N        the random moments' seed (printed in the report; default: new)\n"
	      "  --min-cycles N  a program that succeeds still fails (125) with fewer completed\n"
	      "                  cycles (default 1 with --cycle)\n"
	      "  --timeout S     the longest a sleep or a wake (with its retries) may take\n"
	      "                  (default 120)\n"
	      "  --report FILE   write the figures as JSON to FILE at exit\n"
	      "\n"
	      "exit: the program's status; 125 when it succeeded but a sleep or wake failed or too\n"
	      "  few cycles were done, or when vmmctl run could not start it (no library);\n"
	      "  126 not executable, 127 not found; 2 usage\n",
	      f);
}

static int usage_error(const char *msg, const char *arg)
{
	fprintf(stderr, "vmmctl run: %s%s%s (vmmctl run --help)\n", msg, arg ? ": " : "",
		arg ? arg : "");
	return EXIT_USAGE;
}

static bool parse_seconds(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (!*s || *end || errno || !(v >= lo) || v > hi)
		return false;
	*out = v;
	return true;
}

static bool parse_count(const char *s, unsigned long long hi, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end || errno || v > hi)
		return false;
	*out = v;
	return true;
}

static bool valid_tag(const char *t)
{
	size_t n = strlen(t);

	if (n == 0 || n >= PROTO_TAG_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] < 0x20 || (unsigned char)t[i] > 0x7e)
			return false;
	return true;
}

/* argv[0] is "run". Returns -1 when parsed, else the exit status (help, usage error). */
static int parse(int argc, char **argv, run_opts *o)
{
	int i;

	memset(o, 0, sizeof(*o));
	o->min_cycles = -1;
	o->timeout = DEFAULT_TIMEOUT_S;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *val = NULL;
		char opt[32];

		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-' || !a[1])
			break; /* the program */
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			run_usage(stdout);
			return EXIT_OK;
		}
		eq = strchr(a, '=');
		snprintf(opt, sizeof(opt), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
		if (strcmp(opt, "--cycle") && strcmp(opt, "--discard") && strcmp(opt, "--seed") &&
		    strcmp(opt, "--min-cycles") && strcmp(opt, "--timeout") &&
		    strcmp(opt, "--report"))
			return usage_error("unknown option", a);
		if (eq)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else
			return usage_error("option needs a value", a);
		if (!strcmp(opt, "--cycle")) {
			if (!parse_seconds(val, 0.01, 86400, &o->cycle))
				return usage_error("--cycle wants seconds, 0.01 to 86400", val);
		} else if (!strcmp(opt, "--discard")) {
			if (!valid_tag(val))
				return usage_error("a tag has 1 to 31 printable ASCII bytes", val);
			if (o->ndiscard == RUN_MAX_DISCARD)
				return usage_error("at most 8 --discard tags", val);
			snprintf(o->discard[o->ndiscard++], PROTO_TAG_MAX, "%s", val);
		} else if (!strcmp(opt, "--seed")) {
			unsigned long long v;

			if (!parse_count(val, ~0ull, &v))
				return usage_error("--seed wants a whole number", val);
			o->seed = v;
			o->have_seed = true;
		} else if (!strcmp(opt, "--min-cycles")) {
			unsigned long long v;

			if (!parse_count(val, 1000000, &v))
				return usage_error("--min-cycles wants 0 to 1000000", val);
			o->min_cycles = (long)v;
		} else if (!strcmp(opt, "--timeout")) {
			if (!parse_seconds(val, 0.001, 86400, &o->timeout) || o->timeout <= 0)
				return usage_error("--timeout wants seconds (0 < S <= 86400)", val);
		} else {
			if (!*val)
				return usage_error("--report wants a file name", NULL);
			o->report = val;
		}
	}
	if (i >= argc)
		return usage_error("which program? (vmmctl run [OPTIONS] -- PROGRAM [ARGS])", NULL);
	if (o->cycle <= 0 && (o->ndiscard || o->have_seed || o->min_cycles >= 0))
		return usage_error("--discard, --seed and --min-cycles go with --cycle", NULL);
	if (o->min_cycles < 0)
		o->min_cycles = o->cycle > 0 ? 1 : 0;
	if (!o->have_seed)
		o->seed = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
	o->argv = argv + i;
	return -1;
}

static bool is_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode);
}

/* The library to preload, as an absolute path. false (with why) when there is none. */
static bool find_library(char *out, size_t cap, char *why, size_t whylen)
{
	const char *env = getenv("VMMSHIM_LIBRARY");
	char exe[PATH_MAX], dir[PATH_MAX], cand[PATH_MAX + 64], real[PATH_MAX];
	const char *patterns[] = { "%s/" VMMCTL_RUN_LIBDIR "/" LIB_NAME,
				   "%s/../shim/" LIB_NAME,        /* the build tree */
				   "%s/../lib*/" LIB_NAME,
				   "%s/../lib/*/" LIB_NAME };      /* multiarch */
	ssize_t n;

	if (env && *env) {
		if (!is_file(env) || !realpath(env, real)) {
			snprintf(why, whylen, "VMMSHIM_LIBRARY=%s: no such file", env);
			return false;
		}
		snprintf(out, cap, "%s", real);
		return true;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		snprintf(why, whylen, "cannot tell where vmmctl is (/proc/self/exe: %s); set "
			 "VMMSHIM_LIBRARY=/path/to/" LIB_NAME, strerror(errno));
		return false;
	}
	exe[n] = '\0';
	snprintf(dir, sizeof(dir), "%s", exe);
	*strrchr(dir, '/') = '\0';
	for (size_t k = 0; k < sizeof(patterns) / sizeof(patterns[0]); k++) {
		glob_t g;

		/* An absolute libdir from the build ignores the folder of vmmctl. */
		if (k == 0 && VMMCTL_RUN_LIBDIR[0] == '/')
			snprintf(cand, sizeof(cand), "%s", VMMCTL_RUN_LIBDIR "/" LIB_NAME);
		else
			snprintf(cand, sizeof(cand), patterns[k], dir);
		if (glob(cand, 0, NULL, &g))
			continue;
		for (size_t j = 0; j < g.gl_pathc; j++) {
			if (is_file(g.gl_pathv[j]) && realpath(g.gl_pathv[j], real)) {
				snprintf(out, cap, "%s", real);
				globfree(&g);
				return true;
			}
		}
		globfree(&g);
	}
	snprintf(why, whylen, LIB_NAME " not found beside %s (in %s/" VMMCTL_RUN_LIBDIR ", "
		 "%s/../lib*, or a build tree's shim/); set VMMSHIM_LIBRARY=/path/to/" LIB_NAME,
		 exe, dir, dir);
	return false;
}

/* Starts the program with lib preloaded. Returns its pid, or -(exit status) when it could not
 * be started (said why on stderr). */
static pid_t launch(char **argv, const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	size_t len = strlen(lib) + (old ? strlen(old) + 1 : 0) + 1;
	char *preload = malloc(len);
	int fds[2], err = 0;
	pid_t pid;
	ssize_t n;

	if (!preload || pipe2(fds, O_CLOEXEC)) {
		fprintf(stderr, "vmmctl run: %s\n", strerror(errno));
		free(preload);
		return -RUN_EXIT_FAILED;
	}
	/* First, so that the shim comes before any other preloaded library. */
	snprintf(preload, len, "%s%s%s", lib, old && *old ? " " : "", old && *old ? old : "");
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "vmmctl run: fork: %s\n", strerror(errno));
		free(preload);
		close(fds[0]);
		close(fds[1]);
		return -RUN_EXIT_FAILED;
	}
	if (pid == 0) {
		close(fds[0]);
		setenv("LD_PRELOAD", preload, 1);
		execvp(argv[0], argv);
		err = errno;
		if (write(fds[1], &err, sizeof(err)) < 0)
			_exit(RUN_EXIT_NOTFOUND);
		_exit(err == ENOENT ? RUN_EXIT_NOTFOUND : RUN_EXIT_NOEXEC);
	}
	free(preload);
	close(fds[1]);
	do
		n = read(fds[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(fds[0]);
	if (n == (ssize_t)sizeof(err)) {
		fprintf(stderr, "vmmctl run: cannot run %s: %s\n", argv[0], strerror(err));
		waitpid(pid, NULL, 0);
		return -(err == ENOENT ? RUN_EXIT_NOTFOUND : RUN_EXIT_NOEXEC);
	}
	return pid;
}

static void install_handlers(void)
{
	struct sigaction sa;
	const int sigs[] = { SIGINT, SIGQUIT, SIGTERM, SIGHUP };

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

static void pause_for(double seconds)
{
	struct timespec ts;

	if (seconds <= 0)
		return;
	ts.tv_sec = (time_t)seconds;
	ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL); /* a signal ends it early: handled by the caller's loop */
}

static void write_report(const run_opts *o, const run_cycler *c, pid_t pid, int status,
			 double seconds, int exit_code)
{
	FILE *f = fopen(o->report, "w");

	if (!f) {
		fprintf(stderr, "vmmctl run: cannot write the report %s: %s\n", o->report,
			strerror(errno));
		return;
	}
	fputs("{\"program\": ", f);
	run_json_string(f, o->argv[0]);
	fprintf(f, ", \"pid\": %ld, \"exit_status\": %d, \"signal\": %d, \"vmmctl_exit\": %d, "
		"\"seconds\": %.6f, \"min_cycles\": %ld, ", (long)pid,
		WIFEXITED(status) ? WEXITSTATUS(status) : -1,
		WIFSIGNALED(status) ? WTERMSIG(status) : 0, exit_code, seconds, o->min_cycles);
	run_cycler_json(c, f);
	fputs("}\n", f);
	if (fclose(f))
		fprintf(stderr, "vmmctl run: writing the report %s: %s\n", o->report,
			strerror(errno));
}

int run_main(int argc, char **argv)
{
	run_opts o;
	run_cycler c;
	char lib[PATH_MAX], why[PATH_MAX * 3 + 256];
	double start;
	int status = 0, code, rc = parse(argc, argv, &o);
	pid_t pid;
	bool stopping = false, killed = false;

	if (rc >= 0)
		return rc;
	if (!find_library(lib, sizeof(lib), why, sizeof(why))) {
		fprintf(stderr, "vmmctl run: %s\n", why);
		return RUN_EXIT_FAILED;
	}
	install_handlers();
	start = vmm_now_s();
	pid = launch(o.argv, lib);
	if (pid < 0)
		return -pid;
	run_cycler_init(&c, &o, pid, start);
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		double now;

		if (w == pid || (w < 0 && errno != EINTR))
			break;
		if (pending_signal) {
			int sig = pending_signal;
			bool from_user = pending_from_user;

			pending_signal = 0;
			/* Wake it first: a program held asleep could not act on the signal. */
			if (!stopping) {
				stopping = true;
				run_cycler_stop(&c, vmm_now_s());
			}
			if (sig == SIGTERM || sig == SIGHUP || from_user)
				kill(pid, sig);
		}
		now = vmm_now_s();
		if (!stopping)
			run_cycler_tick(&c, now);
		if (c.state == RUN_STUCK && !killed) {
			/* Held asleep for good, it would wait forever: end it. */
			fprintf(stderr, "vmmctl run: the program cannot be woken; killing it\n");
			kill(pid, SIGKILL);
			killed = stopping = true;
		}
		now = vmm_now_s();
		double wait = run_cycler_due_in(&c, now);
		pause_for(wait < POLL_S ? wait : POLL_S);
	}
	run_cycler_stop(&c, vmm_now_s());
	if (WIFEXITED(status))
		code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		code = 128 + WTERMSIG(status);
	else
		code = RUN_EXIT_FAILED;
	if (o.cycle > 0) {
		run_cycler_report(&c, stderr);
		if (code == 0 && (c.failures || c.state == RUN_STUCK)) {
			fprintf(stderr, "vmmctl run: the program succeeded, but a sleep or wake "
				"failed: exit %d\n", RUN_EXIT_FAILED);
			code = RUN_EXIT_FAILED;
		} else if (code == 0 && c.cycles < o.min_cycles) {
			fprintf(stderr, "vmmctl run: the program succeeded after %d cycle%s, fewer "
				"than --min-cycles %ld: exit %d\n", c.cycles,
				c.cycles == 1 ? "" : "s", o.min_cycles, RUN_EXIT_FAILED);
			code = RUN_EXIT_FAILED;
		}
		if (WIFSIGNALED(status))
			fprintf(stderr, "vmmctl run: the program was ended by signal %d (%s)\n",
				WTERMSIG(status), strsignal(WTERMSIG(status)));
		else if (WIFEXITED(status))
			fprintf(stderr, "vmmctl run: the program exited with status %d\n",
				WEXITSTATUS(status));
	}
	if (o.report)
		write_report(&o, &c, pid, status, vmm_now_s() - start, code);
	run_cycler_free(&c);
	return code;
}
