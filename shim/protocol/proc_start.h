/* A process's start time (/proc/PID/stat field 22, clock ticks since boot): with the pid it names
 * one process for its whole life, so that a pid reused by a later process is told apart. Used by
 * the shim (legacy IPC handles, kept peer connections, a group's shared VMM handles) and by vmmctl
 * (which carries an exporter's start time in app_release). */
#ifndef VMMSHIM_PROC_START_H
#define VMMSHIM_PROC_START_H

#include <stdint.h>
#include <sys/types.h>

/* The start time of pid; 0 when it does not exist or cannot be read. */
uint64_t proc_start_time(pid_t pid);

#endif
