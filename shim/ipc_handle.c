/* The shim's legacy IPC handle (ipc_handle.h). */
#include "ipc_handle.h"

#include "protocol/proc_start.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t ipc_process_start_time(pid_t pid)
{
	return proc_start_time(pid);
}

bool ipc_handle_make(ipc_handle *h, uint64_t id, uint64_t base, uint64_t size)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, IPC_HANDLE_MAGIC, sizeof(h->magic));
	h->version = 1;
	h->pid = (uint32_t)getpid();
	h->start_time = ipc_process_start_time(getpid());
	h->id = id;
	h->base = base;
	h->size = size;
	return h->start_time != 0;
}

bool ipc_handle_parse(const void *bytes, ipc_handle *out)
{
	memcpy(out, bytes, sizeof(*out));
	return !memcmp(out->magic, IPC_HANDLE_MAGIC, sizeof(out->magic)) && out->version == 1 &&
	       out->pid > 0 && out->id && out->base;
}
