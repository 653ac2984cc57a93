/* Requests to another shimmed process over a connection kept open between them: the importer of
 * legacy IPC memory asks its exporter once per tensor, and connecting each time (socket, connect,
 * the checks, and the server's accept) was most of the request's time. A connection is kept per
 * peer (pid and a token of the caller's: the process's start time, so that a reused pid is a new
 * peer), at most PEER_KEPT_MAX of them (the least recently used closed beyond), only in the
 * process that made it (a forked child makes its own). Pure socket code, no shim state. */
#ifndef VMMSHIM_PEER_KEPT_H
#define VMMSHIM_PEER_KEPT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "peer_request.h"

#define PEER_KEPT_MAX 16

/* Does pid still name the process token names? Called on a new connection after the socket's
 * process was checked (peer_connect) and before anything is sent. */
typedef bool (*peer_check_fn)(pid_t pid, uint64_t token);

#define PEER_KEPT_REFUSED (-2)

/* As peer_request (peer_request.h), over the connection kept for (pid, token) when there is one
 * still open, else a new one that check must accept. line must ask the server to keep the
 * connection, and the reply ends with its "end" line. After a whole reply, the connection is
 * kept for the next call unless the server closed it. A kept connection found closed, or closed
 * before the reply began (the server gave it up meanwhile), is replaced by a new one, once.
 * Returns 0; -1 with why; PEER_KEPT_REFUSED when check refused the new connection. *reused
 * (may be NULL): the reply came over a kept connection. */
int peer_request_kept(const char *run_dir, pid_t pid, uint64_t token, peer_check_fn check,
		      const char *line, int timeout_ms, peer_reply *out, bool *reused, char *why,
		      size_t whylen);

/* As peer_request_kept, with a server that may be older than kept connections: one that answers
 * line with an error refusing its key `keep` (its protocol has none) is asked again with
 * plain_line (the same request without it) over a new connection, not kept; *reused is then
 * false. Returns as peer_request_kept. */
int peer_request_kept_or_plain(const char *run_dir, pid_t pid, uint64_t token,
			       peer_check_fn check, const char *line, const char *plain_line,
			       int timeout_ms, peer_reply *out, bool *reused, char *why,
			       size_t whylen);

/* Connections kept now, and closing them all (tests, and what a forked child does first). */
int peer_kept_count(void);
void peer_kept_close_all(void);

#endif
