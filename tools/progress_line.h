/* The progress line of `vmmctl sleep` and `wake`: while the reply is awaited, the process is
 * asked for its progress record on a second connection and one line is shown on stderr (on a
 * terminal rewritten in place; otherwise, with --progress, one line per second). */
#ifndef VMMCTL_PROGRESS_LINE_H
#define VMMCTL_PROGRESS_LINE_H

#include <stdbool.h>

#include "client.h"

struct progress_line {
	bool tty;         /* rewrite one line in place */
	double last;      /* when a line was last printed (not a terminal: one a second) */
};

/* A client_tick_fn; arg: a struct progress_line. */
void progress_line_tick(const client_target *t, const proto_request *req, double waited,
			bool done, void *arg);

/* "sleep: copying 12.50 GiB of 60.00 GiB (20%), 24.31 GB/s, 2.0 s left, 3.1 s" from a progress
 * record (NULL: "sleep: 3.1 s"). */
void progress_line_format(char *buf, size_t cap, const char *verb, const proto_record *p,
			  double waited);

#endif
