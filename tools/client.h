/* vmmctl's side of the control socket: find a process's socket, check who answers on it, send
 * one request and read a bounded reply, every step within the deadline. */
#ifndef VMMCTL_CLIENT_H
#define VMMCTL_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "protocol.h"

/* Memory vmmctl spends on a reply's parsed records at most (beyond: the reply is refused). */
#define CLIENT_RECORDS_BUDGET (32u << 20)
/* How long to try to connect when no --timeout was given. */
#define CLIENT_CONNECT_DEFAULT_S 10.0

typedef struct client_error {
	int exit_code;             /* enum vmmctl_exit */
	char status[32];           /* a PROTO_ERR_* word, or no_process / not_shimmed /
				    * refused_folder / untrusted / timeout / protocol */
	char message[512];
} client_error;

typedef struct client_reply {
	const char *word;          /* "ok", "already" or "error" */
	int nrecords;
	proto_record **records;    /* each allocated to the size of its fields */
	size_t bytes;              /* what they take */
} client_reply;

/* A control socket and what vmmctl knows about it. */
typedef struct client_target {
	pid_t pid;                 /* the pid in the socket's name */
	char path[108];            /* sun_path */
	char dir[512];
} client_target;

/* The socket of pid. Returns 0, or an exit code with e filled. */
int client_find_socket(pid_t pid, client_target *t, client_error *e);

/* Connect to t (checking who answers: trust.h), send req and read the whole reply, giving up
 * after timeout seconds (<= 0: connecting gives up after CLIENT_CONNECT_DEFAULT_S, the reply is
 * waited for as long as it takes). progress: show the time waited on stderr (a terminal).
 * Returns 0 (the reply may still be an error reply: see client_reply_error), or an exit code.
 * A socket that refuses connections and whose process has ended is removed when
 * remove_stale (its name is then in e's message, with status "stale"). */
int client_call(const client_target *t, const proto_request *req, double timeout,
		bool progress, bool remove_stale, client_reply *out, client_error *e);

/* client_call with a function called while the reply is awaited: every half second or so after
 * the first second (waited: seconds so far, done false), and once more after the reply when it
 * had been called (done true), so that it can clear what it showed. NULL: none. */
typedef void (*client_tick_fn)(const client_target *t, const proto_request *req, double waited,
			       bool done, void *arg);
int client_call_tick(const client_target *t, const proto_request *req, double timeout,
		     client_tick_fn tick, void *tick_arg, bool remove_stale, client_reply *out,
		     client_error *e);

/* An error reply as an exit code and message; 0 when the reply is not an error. */
int client_reply_error(const client_reply *r, client_error *e);

const proto_record *client_reply_find(const client_reply *r, const char *kind);
void client_reply_free(client_reply *r);

/* Every socket to look at for `list`: the caller's folders (root: every user's). Returns how
 * many were put in *out (malloc'd; free it), -1 when out of memory. Folders that are refused
 * are reported through note(). */
int client_list_sockets(client_target **out, void (*note)(const char *msg, void *arg),
			void *arg);

#endif
