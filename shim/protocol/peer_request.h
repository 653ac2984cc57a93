/* A request from one shimmed process to another's control socket, with a deadline: connect to
 * <run folder>/<pid>.sock, check that the process answering is that pid and runs as our uid
 * (SO_PEERCRED), send one request line, read the whole reply and the file descriptors that came
 * with it (fd_pass.h). Pure socket code, no shim state: usable by any shim-to-shim call. */
#ifndef VMMSHIM_PEER_REQUEST_H
#define VMMSHIM_PEER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PEER_REPLY_MAX_FDS 1024     /* more are closed on arrival */

typedef struct peer_reply {
	char *text;        /* the reply, NUL-terminated (malloc'd; peer_reply_free) */
	size_t len;
	int fds[PEER_REPLY_MAX_FDS]; /* received (close-on-exec), owned by the caller */
	size_t nfds;
} peer_reply;

/* 0 with *out filled, or -1 with why: no such socket (the process ended or has no shim),
 * refused (not our uid, folder not private), timed out (timeout_ms from now), or cut short. */
int peer_request(const char *run_dir, pid_t pid, const char *line, int timeout_ms,
		 peer_reply *out, char *why, size_t whylen);

/* The steps of peer_request, for other ways of using a connection (peer_kept.h). deadline_ms is
 * on fd_pass_now_ms()'s clock.
 * peer_connect: a connected socket to pid's control socket, checked as peer_request checks it
 * (the folder private, the process answering pid and of our uid), or -1 with why.
 * peer_read_reply: read a reply (and its descriptors) from fd into *out: until the peer closes,
 * or, with until_end, until the reply's last line ("end"); a peer that closes before it is then
 * an error, errno ECONNRESET when no byte came (the connection was closed before the reply began)
 * or EPROTO. 0, or -1 with why and errno (ETIMEDOUT past the deadline). */
int peer_connect(const char *run_dir, pid_t pid, long long deadline_ms, char *why, size_t whylen);
int peer_read_reply(int fd, pid_t pid, long long deadline_ms, bool until_end, peer_reply *out,
		    char *why, size_t whylen);

/* Format why (the peer functions' error text) and return -1. */
int peer_fail(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Free the text and close every descriptor still in out (set an entry to -1 to keep it). */
void peer_reply_free(peer_reply *out);

#endif
