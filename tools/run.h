/* vmmctl run: start a program under the shim (run.c) and, with --cycle, sleep and wake it at
 * random moments in a rhythm (run_cycle.c), reporting what the cycles cost at exit. */
#ifndef VMMCTL_RUN_H
#define VMMCTL_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "protocol.h"

#define RUN_MAX_DISCARD 8
#define RUN_MAX_ERRORS 8

typedef struct run_opts {
	double cycle;              /* mean seconds between sleeps; 0: no cycling */
	char discard[RUN_MAX_DISCARD][PROTO_TAG_MAX]; /* tags dropped, not copied, at each sleep */
	int ndiscard;
	uint64_t seed;
	bool have_seed;
	long min_cycles;           /* fewer completed cycles make a successful run fail */
	double timeout;            /* seconds for each sleep or wake, retries of a wake included */
	const char *report;        /* JSON report written here at exit (NULL: none) */
	char **argv;               /* the program and its arguments (NULL-terminated) */
} run_opts;

/* One direction's figures, one entry per cycle. */
typedef struct run_series {
	int n, cap;
	double *seconds;           /* the shim's own transfer time of each cycle */
	uint64_t released, copied; /* summed over the cycles */
} run_series;

typedef enum run_state { RUN_AWAKE, RUN_ASLEEP, RUN_STUCK, RUN_STOPPED } run_state;

typedef struct run_cycler {
	const run_opts *o;
	pid_t pid;
	uint64_t rng;
	run_state state;
	double next_at;            /* AWAKE: the next sleep; ASLEEP: the next wake (or retry) */
	double wake_deadline;      /* ASLEEP: when a wake that keeps failing is given up */
	int cycles, skipped, failures;
	run_series sleeps, wakes;
	char errors[RUN_MAX_ERRORS][256];
	int nerrors;
} run_cycler;

/* vmmctl run's entry: argv[0] is "run". Returns the exit status (the program's). */
int run_main(int argc, char **argv);

/* The cycler, driven by run.c while the program runs: start at time now (vmm_now_s
 * seconds), do what is due at each tick, and stop (waking the program if the cycler put it to
 * sleep). */
void run_cycler_init(run_cycler *c, const run_opts *o, pid_t pid, double now);
void run_cycler_tick(run_cycler *c, double now);
/* Seconds from now until the cycler has something to do (0 when due; large when stopped). */
double run_cycler_due_in(const run_cycler *c, double now);
void run_cycler_stop(run_cycler *c, double now);
void run_cycler_free(run_cycler *c);
void run_cycler_report(const run_cycler *c, FILE *f);
/* The cycler's part of the JSON report: "key": value pairs, no braces. */
void run_cycler_json(const run_cycler *c, FILE *f);

/* s as a JSON string, quotes included. */
void run_json_string(FILE *f, const char *s);

#endif
