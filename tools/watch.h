/* --watch: run a command again every --interval seconds, until --count runs, an interrupt
 * (SIGINT, SIGTERM: exit 0 after the run in progress) or a reader that went away (SIGPIPE is
 * ignored and a failed write ends the watch quietly, exit 0). */
#ifndef VMMCTL_WATCH_H
#define VMMCTL_WATCH_H

#include "cli.h"

int watch_run(const vmmctl_args *a, int (*once)(const vmmctl_args *a));

#endif
