/* The files every sharing process of one GPU maps (share_internal.h): the event page
 * (share-<UUID>.event) and the member table (share-<UUID>.members), opened the same way. */
#include "share_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *share_gpu_file_map(const char *dir, const char *uuid, const char *suffix, size_t bytes,
			 int *fd_out, char path[SHARE_PATH_MAX])
{
	struct stat st;
	void *p;
	int fd;

	if (snprintf(path, SHARE_PATH_MAX, "%s/share-%s.%s", dir, uuid, suffix) >= SHARE_PATH_MAX)
		return NULL;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return NULL;
	/* Another user's file is not ours to map. Never made smaller (other processes map it): only
	 * grown to its size, and a new one is zeros. */
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_size < (off_t)bytes && ftruncate(fd, (off_t)bytes))) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	*fd_out = fd;
	return p;
}
