/* Sockets left by ended processes (stale_socket.h). */
#include "stale_socket.h"

#include <sys/stat.h>
#include <unistd.h>

#include "proc_start.h"

bool stale_socket_remove(const char *path, const struct stat *seen, pid_t pid)
{
	struct stat now;

	return !lstat(path, &now) && S_ISSOCK(now.st_mode) && now.st_ino == seen->st_ino &&
	       now.st_dev == seen->st_dev && proc_ended(pid) && !unlink(path);
}
