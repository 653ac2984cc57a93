/* progress_line.h. The second connection asks `hello`, which the process answers at once while
 * a sleep or wake runs (with the progress record); a process that does not answer within a
 * second costs this line, not the operation. */
#include "progress_line.h"

#include <stdio.h>
#include <string.h>

#include "output.h"

#define ASK_TIMEOUT_S 1.0

void progress_line_format(char *buf, size_t cap, const char *verb, const proto_record *p,
			  double waited)
{
	uint64_t done = 0, total = 0;
	double gbps = 0, eta = -1;
	char b1[32], b2[32], left[48] = "";
	const char *phase = p ? proto_record_str(p, "phase") : NULL;

	if (!p) {
		snprintf(buf, cap, "%s: %.1f s", verb, waited);
		return;
	}
	proto_record_u64(p, "bytes_done", &done);
	proto_record_u64(p, "bytes_total", &total);
	proto_record_double(p, "gbps", &gbps);
	proto_record_double(p, "eta_seconds", &eta);
	if (eta >= 0)
		snprintf(left, sizeof(left), ", %.1f s left", eta);
	snprintf(buf, cap, "%s: %s %s of %s (%d%%), %.2f GB/s%s, %.1f s", verb,
		 out_safe(phase ? phase : "?"), out_bytes(done, b1, sizeof(b1)),
		 out_bytes(total, b2, sizeof(b2)),
		 total ? (int)(done * 100 / total) : 0, gbps, left, waited);
}

void progress_line_tick(const client_target *t, const proto_request *req, double waited,
			bool done, void *arg)
{
	struct progress_line *pl = arg;
	proto_request ask = { .verb = PROTO_HELLO, .device = -1 };
	client_reply reply;
	client_error e;
	char line[256];

	if (done) {
		if (pl->tty)
			fputs("\r\033[K", stderr);
		return;
	}
	if (!pl->tty && waited - pl->last < 1.0 && pl->last > 0)
		return;
	if (client_call(t, &ask, ASK_TIMEOUT_S, false, false, &reply, &e)) {
		progress_line_format(line, sizeof(line), proto_verb_name(req->verb), NULL, waited);
	} else {
		progress_line_format(line, sizeof(line), proto_verb_name(req->verb),
				     client_reply_find(&reply, "progress"), waited);
		client_reply_free(&reply);
	}
	fprintf(stderr, pl->tty ? "\r%s\033[K" : "%s\n", line);
	pl->last = waited;
}
