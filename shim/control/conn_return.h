/* Kept connections coming back to the control server's reading thread (conn_return.c). A
 * share_open client may ask to keep its connection (keep=true): after the answering thread has
 * sent the reply, it hands the connection back here, and the reading thread, woken through
 * conn_return_fd(), takes it (conn_return_take) and waits on it for the next request as on any
 * connection. A connection that cannot be handed back is closed: the client connects again. */
#ifndef VMMSHIM_CONN_RETURN_H
#define VMMSHIM_CONN_RETURN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define CONN_RETURN_MAX 16   /* handed back and not yet taken */

typedef struct conn_returned {
	int fd;
	struct ucred cred;
} conn_returned;

/* Make the wake-up descriptor (once per process; again in a forked child). false: connections
 * cannot be kept (every one is closed after its reply). */
bool conn_return_init(void);
/* What the reading thread polls (POLLIN: something was handed back), or -1. */
int conn_return_fd(void);
/* Hand fd back (any thread). false: not taken (no room, not initialized); fd is still the
 * caller's to close. */
bool conn_return_push(int fd, const struct ucred *cred);
/* Take what was handed back (the reading thread), up to max; returns how many. */
size_t conn_return_take(conn_returned *out, size_t max);
/* In a forked child: what was handed back is the parent's (closed here, so that only the parent
 * holds it), and so is the wake-up descriptor. */
void conn_return_after_fork(void);

#endif
