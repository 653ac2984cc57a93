/* The shim's legacy IPC handle (ipc_handle.h). */
#include "ipc_handle.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t ipc_process_start_time(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command may hold spaces and parentheses: fields count from the last ')'. Field 3
	 * (state) follows it; the start time is field 22. */
	p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &v) != 1)
		return 0;
	return v;
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
