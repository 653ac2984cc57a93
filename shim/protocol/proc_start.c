/* What /proc says of a process (proc_start.h). */
#include "proc_start.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* /proc/PID/stat read into buf: a pointer to the command's last ')' (the state follows it, after
 * a space), or NULL with errno from the open when it could not be read. The command may hold
 * spaces and parentheses, so fields count from there. */
static const char *stat_command_end(pid_t pid, char *buf, size_t cap)
{
	char path[64], *paren;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	n = read(fd, buf, cap - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	paren = strrchr(buf, ')');
	if (!paren)
		errno = EIO;
	return paren;
}

uint64_t proc_start_time(pid_t pid)
{
	char buf[1024];
	const char *p = stat_command_end(pid, buf, sizeof(buf));
	unsigned long long v = 0;

	/* Field 3 (state) follows the command; the start time is field 22. */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &v) != 1)
		return 0;
	return v;
}

bool proc_ended(pid_t pid)
{
	char buf[1024];
	const char *p;

	if (kill(pid, 0) && errno == ESRCH)
		return true;
	p = stat_command_end(pid, buf, sizeof(buf));
	if (!p)
		return errno == ENOENT;
	return p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}
