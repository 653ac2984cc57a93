/* A small client of the control protocol for one shim to ask another (same user, same run
 * folder) something: connect to <dir>/<pid>.sock, check that the process answering is pid and
 * runs as our user, send one request and read the whole reply, every step within one deadline.
 * Used by GPU sharing (shim/share); anything else in the shim that must talk to a peer may use it.
 * It never blocks past its deadline and never crashes on a bad reply (it is refused). */
#ifndef VMMSHIM_PEER_CLIENT_H
#define VMMSHIM_PEER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "protocol.h"

#define PEER_MAX_RECORDS 32   /* records kept from a reply (the rest are counted, not kept) */

typedef struct peer_client_reply {
	char word[16];            /* "ok", "already" or "error" */
	int nrecords;             /* records kept (at most PEER_MAX_RECORDS) */
	proto_record *records;    /* malloc'd; peer_client_free */
} peer_client_reply;

/* Ask pid (its socket in dir) req, within timeout_ms. Returns 0 with *out filled (the reply may
 * be an error reply: see peer_client_error), or -1 with why (no socket, not our user, timeout,
 * malformed reply). */
int peer_client_call(const char *dir, pid_t pid, const proto_request *req, int timeout_ms,
	      peer_client_reply *out, char *why, size_t whylen);

/* The first record of kind, or NULL. */
const proto_record *peer_client_find(const peer_client_reply *r, const char *kind);
/* The nth record of kind (0-based), or NULL. */
const proto_record *peer_client_nth(const peer_client_reply *r, const char *kind, int n);
/* An error reply's message (NULL when the reply is not an error). */
const char *peer_client_error(const peer_client_reply *r);
void peer_client_free(peer_client_reply *r);

/* The pids of the sockets in dir ("<pid>.sock"), without self and without those left by ended
 * processes (removed: a folder of many killed processes must not fill the max before the live
 * ones are read); returns how many (up to max). */
int peer_client_list(const char *dir, pid_t self, pid_t *out, int max);

/* Whether pid's socket in dir takes connections: false only when there is no socket, or it
 * refuses them (no listener); true when it cannot tell. A process of another pid namespace that
 * shares the folder is told alive by this, where /proc would not know it. */
bool peer_client_serving(const char *dir, pid_t pid);

#endif
