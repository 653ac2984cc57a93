/* Sockets left by ended processes (stale_socket.h). */
#include "stale_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool proc_ended(pid_t pid)
{
	char path[64], buf[512], *paren;
	ssize_t n;
	int fd;

	if (kill(pid, 0) && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "pid (comm) S ...": the state follows the last ')'. */
	paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

bool stale_socket_remove(const char *path, const struct stat *seen, pid_t pid)
{
	struct stat now;

	return !lstat(path, &now) && S_ISSOCK(now.st_mode) && now.st_ino == seen->st_ino &&
	       now.st_dev == seen->st_dev && proc_ended(pid) && !unlink(path);
}
