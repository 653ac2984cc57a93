/* Where control sockets live: $VMMSHIM_RUN_DIR/<pid>.sock, else $XDG_RUNTIME_DIR/vmmshim/, else
 * /tmp/vmmshim-<uid>/. The folder is private (0700, owned by its user); the server refuses to use
 * one that is not, and vmmctl looks only in such folders. Shared by the server and vmmctl. */
#ifndef VMMSHIM_RUN_DIR_H
#define VMMSHIM_RUN_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The folder for the given environment values (NULL when unset) and uid. Returns 0, or -1 when
 * the result does not fit in cap. Pure. */
int run_dir_resolve(const char *vmmshim_run_dir, const char *xdg_runtime_dir, uid_t uid,
		    char *out, size_t cap);

/* The folder for this process's own environment. */
int run_dir_default(char *out, size_t cap);

/* The shim's rule for its folder: st (from lstat) is a real folder (not a symlink) owned by
 * owner with no access for group or others. Returns 0 or -1 with why. Pure. vmmctl uses it to
 * explain why a process has no socket. */
struct stat;
int run_dir_check(const char *dir, const struct stat *st, uid_t owner, char *why, size_t whylen);

/* Create dir (mode 0700) if it is missing, then apply run_dir_check for the effective uid.
 * Returns 0 or -1 with why. */
int run_dir_prepare(const char *dir, char *why, size_t whylen);

/* Is dir a folder owned by uid (or by root) that group and others cannot write? Used by vmmctl
 * before trusting the sockets in it. */
bool run_dir_trusted(const char *dir, uid_t uid);

/* dir/<pid>.sock; -1 when it is longer than a Unix socket address allows. */
int run_dir_socket_path(const char *dir, pid_t pid, char *out, size_t cap);

#endif
