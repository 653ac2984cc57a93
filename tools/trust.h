/* What vmmctl believes about a control socket before it sends a request or prints a reply: the
 * rules as one pure function of the facts gathered about the socket (client.c gathers them), so
 * that each rule can be tested without another user or another PID namespace. */
#ifndef VMMCTL_TRUST_H
#define VMMCTL_TRUST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct trust_facts {
	uid_t caller;          /* vmmctl's effective uid */
	bool dir_is_dir;       /* the socket's folder is a real folder (lstat: not a symlink) */
	uid_t dir_owner;
	mode_t dir_mode;
	long dir_named_uid;    /* the uid the folder's name is for (/tmp/vmmshim-UID,
				* /run/user/UID/vmmshim), or -1 */
	uid_t peer_uid;        /* SO_PEERCRED of the connected socket */
	pid_t peer_pid;        /* as translated into vmmctl's PID namespace; 0: not visible */
	pid_t name_pid;        /* the pid in the socket's name (PID.sock) */
	int same_pidns;        /* the peer is in vmmctl's PID namespace: 1, 0, or -1 unknown */
} trust_facts;

/* 0 when the server on the socket may be believed, or -1 with why. The rules:
 * - the folder is a real folder that group and others cannot write, owned by the caller (root
 *   may use any user's), and owned by the uid its name is for;
 * - the server runs as the folder's owner (so root walking every user's folder cannot be fooled
 *   by a server of another user placed there, and a user only ever talks to their own);
 * - in the same PID namespace, the server is the process its socket's name says. In another
 *   one (a container) the pids cannot be compared: SO_PEERCRED translates them. */
int trust_decide(const trust_facts *f, char *why, size_t whylen);
/* The rules about the folder alone (caller, dir_*): 0 or -1 with why. */
int trust_folder(const trust_facts *f, char *why, size_t whylen);

/* The uid a run folder's name is for, or -1 (pure). */
long trust_dir_named_uid(const char *dir);

#endif
