/* vmmctl's command line: what was asked for, and the exit codes it promises. */
#ifndef VMMCTL_CLI_H
#define VMMCTL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "protocol.h"

/* Exit codes (documented in --help and docs/vmmctl.md). */
enum vmmctl_exit {
	EXIT_OK = 0,          /* done (or already in the asked state) */
	EXIT_REPORTED = 1,    /* the process reported an error (cancel: the operation had finished) */
	EXIT_USAGE = 2,       /* bad command line */
	EXIT_NO_PROCESS = 3,  /* no such process (or it ended meanwhile), not running under
			       * vmmshim, or without a control socket */
	EXIT_PERMISSION = 4,  /* not allowed to drive that process, or its socket is not trusted */
	EXIT_TIMEOUT = 5,     /* no answer within --timeout */
};

typedef enum vmmctl_cmd {
	CMD_HELP,
	CMD_VERSION,
	CMD_LIST,
	CMD_STATUS,
	CMD_SLEEP,
	CMD_WAKE,
	CMD_CANCEL,
	CMD_METRICS,
} vmmctl_cmd;

/* sleep and wake take several processes: one group operation (group.h). */
#define VMMCTL_MAX_GROUP 64
#define CLI_MAX_LABELS 8   /* metrics --label */

typedef struct vmmctl_args {
	vmmctl_cmd cmd;
	pid_t pid;                 /* the first (or only) process */
	pid_t pids[VMMCTL_MAX_GROUP];
	int npids;
	char tag[PROTO_TAG_MAX];   /* "" = every tag */
	int device;                /* -1 = every device */
	bool discard, autowake, json;
	bool progress;             /* sleep/wake: a progress line on stderr even off a terminal */
	bool watch;                /* list/metrics/status: again every `interval` seconds */
	double interval;           /* --watch's period (default 2 s) */
	long count;                /* --watch: stop after this many (0: until interrupted) */
	const char *output;        /* metrics: write this file atomically instead of stdout */
	const char *labels[CLI_MAX_LABELS]; /* metrics: NAME=VALUE added to every sample */
	int nlabels;
	double timeout;            /* seconds; <= 0: the command's default */
} vmmctl_args;

/* Parse argv. 0 on success; -1 with why (a usage error). */
int cli_parse(int argc, char **argv, vmmctl_args *out, char *why, size_t whylen);
void cli_usage(FILE *f);

#endif
