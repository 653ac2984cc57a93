/* What /proc says of a process, for the shim and vmmctl alike. Its start time (/proc/PID/stat
 * field 22, clock ticks since boot): with the pid it names one process for its whole life, so
 * that a pid reused by a later process is told apart (legacy IPC handles, kept peer connections,
 * a group's shared VMM handles, vmmctl's app_release). Whether it has ended (stale_socket.h). */
#ifndef VMMSHIM_PROC_START_H
#define VMMSHIM_PROC_START_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The start time of pid; 0 when it does not exist or cannot be read. */
uint64_t proc_start_time(pid_t pid);

/* pid has ended: no process has it, or its process is a zombie (it has closed its sockets and
 * will never serve again). */
bool proc_ended(pid_t pid);

#endif
