/* watch.h. On a terminal (tables for people) each refresh clears the screen; otherwise refreshes
 * follow one another (with --json: one document per line, which agents read as JSON lines). */
#include "watch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

/* Sleep s seconds, waking early on a signal. */
static void pause_for(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s,
			       .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };

	while (!stop && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int watch_run(const vmmctl_args *a, int (*once)(const vmmctl_args *a))
{
	struct sigaction sa;
	bool clear = !a->json && !a->output && isatty(STDOUT_FILENO);
	int rc = EXIT_OK;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;   /* no SA_RESTART: a wait ends at once */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	for (long runs = 0; !stop && (!a->count || runs < a->count); runs++) {
		if (runs)
			pause_for(a->interval);
		if (stop)
			break;
		if (clear) {
			time_t now = time(NULL);
			char when[32];

			strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
			printf("\033[H\033[2Jevery %.1f s, %s (Ctrl-C ends)\n\n", a->interval, when);
		}
		rc = once(a);
		if (fflush(stdout) || ferror(stdout))
			return EXIT_OK; /* the reader has gone: nothing more to say to anyone */
		/* A process that ended or may not be driven will not come back. */
		if (rc == EXIT_NO_PROCESS || rc == EXIT_PERMISSION || rc == EXIT_USAGE)
			return rc;
	}
	return stop ? EXIT_OK : rc;
}
