/* A control socket left by a process that has ended. The shim (reading its peers for GPU sharing)
 * and vmmctl (reaching one process, or listing them) both meet such sockets, since nothing removes
 * a socket when its process is killed; both tell them apart from live ones (proc_ended,
 * proc_start.h) and remove them by this rule. */
#ifndef VMMSHIM_STALE_SOCKET_H
#define VMMSHIM_STALE_SOCKET_H

#include <stdbool.h>
#include <sys/types.h>

struct stat;

/* path refused a connection (ECONNREFUSED: no listener). Remove it when it is still the socket
 * seen before (same device and inode, so a socket re-made by a new process of that pid stays)
 * and pid has ended. Returns true when it was removed. */
bool stale_socket_remove(const char *path, const struct stat *seen, pid_t pid);

#endif
