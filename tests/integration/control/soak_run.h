/* What the two soaks (soak.c, share_soak.c) share around their epochs: the command line and
 * the loop that runs epochs until the time is up. */
#ifndef VMMSHIM_SOAK_RUN_H
#define VMMSHIM_SOAK_RUN_H

#include <stdbool.h>

struct target;

struct soak_args {
	double seconds;          /* at least 5 */
	unsigned long long seed; /* drawn from the clock and pid unless --seed */
	int threads;             /* 1 to 16 */
	int procs;               /* --procs, 2 to procs_max (only where procs_max > 0) */
	int bystanders;          /* --bystanders, 0 to 4 (only where procs_max > 0) */
};

/* --seconds S, --seed N, --threads T and, where procs_max > 0, --procs P and --bystanders B into
 * a (which holds the defaults on entry). On bad input prints name's usage and returns false. */
bool soak_args_parse(int argc, char **argv, const char *name, int procs_max,
		     struct soak_args *a);

/* Epochs of epoch_s each until about `seconds` have passed since start_s; the last one
 * shortened so that the whole run ends near its time. */
void soak_run_epochs(double start_s, double seconds, double epoch_s,
		     void (*epoch)(double secs));

/* The whole log of a program (a failure's message prints only its end), copied as LABEL-PID.log
 * into one folder, made at the first call, whose path is returned (NULL when it could not be made
 * or the copy failed): a failed soak keeps those of the programs still running, and of those it
 * killed earlier in the epoch, since a peer's failure may start in them. */
const char *soak_keep_log(const struct target *t, const char *label);
/* SOAK_KEEP_LOGS is set: every program's log is kept, to read what a passing run logged. */
bool soak_keeping_all_logs(void);
/* An epoch that passed: the logs kept so far go (the folder with them), unless every log is
 * kept (soak_keeping_all_logs). */
void soak_drop_kept_logs(void);

#endif
