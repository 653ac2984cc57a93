/* vmmctl's side of the control socket: find a process's socket, send one request and read the
 * reply within a deadline. */
#ifndef VMMCTL_CLIENT_H
#define VMMCTL_CLIENT_H

#include <stdbool.h>
#include <sys/types.h>

#include "protocol.h"

typedef struct client_error {
	int exit_code;             /* enum vmmctl_exit */
	char status[32];           /* a PROTO_ERR_* word, or no_process / not_shimmed / timeout */
	char message[512];
} client_error;

typedef struct client_reply {
	const char *word;          /* "ok", "already" or "error" */
	int nrecords;
	proto_record *records;
} client_reply;

/* The socket of pid. Returns 0, or an exit code with e filled. */
int client_find_socket(pid_t pid, char *path, size_t cap, client_error *e);

/* Send req to the socket at path and read the whole reply, giving up after timeout seconds
 * (<= 0: wait as long as it takes). progress: show the time waited on stderr (a terminal).
 * Returns 0 (the reply may still be an error reply: see client_reply_error), or an exit code. */
int client_call(const char *path, pid_t pid, const proto_request *req, double timeout,
		bool progress, client_reply *out, client_error *e);

/* An error reply as an exit code and message; 0 when the reply is not an error. */
int client_reply_error(const client_reply *r, client_error *e);

const proto_record *client_reply_find(const client_reply *r, const char *kind);
void client_reply_free(client_reply *r);

/* Every socket folder to look in for `list`; calls fn(path, pid) for each socket of a live
 * process. */
void client_each_socket(void (*fn)(const char *path, pid_t pid, void *arg), void *arg);

#endif
