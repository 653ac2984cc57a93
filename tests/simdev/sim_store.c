/* Where device memory lives: each process puts its allocations in one large sparse memfd (a new
 * one after fork; in a SIMDEV_SHARED group a file beside the group's table, see sim_group.c), a
 * header page and then the bytes; freeing punches the range out. Sharing works like the
 * driver's:
 * - An exported file descriptor is a new open of that file, positioned at the allocation's
 *   header. Like the driver's (each a new open of /dev/nvidiactl) every export of a process has
 *   the same st_dev/st_ino, so only simdev can tell which allocation one carries; sending it with
 *   SCM_RIGHTS (or pidfd_getfd) passes that open file description, which alone imports: a new
 *   open of the file (/proc/PID/fd/N) carries no allocation, as on the driver.
 * - A legacy IPC handle names the process, its descriptor of the memfd and the allocation;
 *   another process of the same user opens /proc/PID/fd/FD.
 * Open-file-description (OFD) locks on the first bytes of an allocation's header say who holds
 * memory that has been shared; the kernel drops them when a process exits or is killed:
 *   byte 0 (ALIVE)  the creator has not freed it (a legacy IPC handle opens only then);
 *   byte 1 (HOLDER) a process holds it: a handle, a mapping or a native allocation uses it;
 *   byte 2 (EXPORT) an exported file descriptor of it is open somewhere.
 * Memory that was never shared takes no locks: single-process programs pay nothing for this. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim_internal.h"

#define FILE_SPAN ((uint64_t)1 << 46) /* sparse: allocations are never placed twice */
#define LOCK_ALIVE 0
#define LOCK_HOLDER 1
#define LOCK_EXPORT 2

/* Written when an allocation is first shared: what an importer needs to know. */
struct sim_header {
	char magic[8];
	uint64_t size;
	uint64_t id;
	int32_t dev;
	int32_t creator;
};

static const char header_magic[8] = "simdevM";
static unsigned gen;            /* fork generation */
static struct sim_file *own;    /* where this process's new allocations go */
static struct sim_file **files; /* every file this process has open (few) */
static size_t nfiles, capfiles;
static struct sim_mem *mems;    /* every live allocation, for lookups by file and offset */

/* One page, so that the bytes after it can be mapped. */
static size_t header_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static size_t span_of(size_t size)
{
	return header_size() + sim_round_up(size, header_size());
}

static int lock_byte(int fd, short type, uint64_t at)
{
	struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)at, .l_len = 1 };
	return fcntl(fd, F_OFD_SETLK, &l);
}

/* Whether another open file description holds a lock on [at, at+len); errors count as held, so
 * that nothing is freed on a doubt. */
static bool others_lock(int fd, uint64_t at, off_t len)
{
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)at,
			   .l_len = len };
	return fcntl(fd, F_OFD_GETLK, &l) || l.l_type != F_UNLCK;
}

bool sim_range_held(int fd, uint64_t off)
{
	return others_lock(fd, off + LOCK_HOLDER, LOCK_EXPORT - LOCK_HOLDER + 1);
}

bool sim_range_alive(int fd, uint64_t off)
{
	return others_lock(fd, off + LOCK_ALIVE, 1);
}

void sim_punch_bytes(int fd, uint64_t off, uint64_t len)
{
	if (len)
		fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
}

void sim_range_punch(int fd, uint64_t off, size_t size)
{
	sim_punch_bytes(fd, off, span_of(size));
}

size_t sim_store_span(size_t size)
{
	return span_of(size);
}

uint64_t sim_store_file_span(void)
{
	return FILE_SPAN;
}

/* A new open file description of what fd refers to. */
static int reopen(int fd, int flags)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, O_RDWR | flags);
}

/* ---- files ---- */

static struct sim_file *file_add(int fd, bool created, int gidx)
{
	struct stat st;
	struct sim_file *f = calloc(1, sizeof(*f));
	if (!f || fstat(fd, &st))
		goto fail;
	if (nfiles == capfiles) {
		size_t cap = capfiles ? capfiles * 2 : 8;
		struct sim_file **v = realloc(files, cap * sizeof(*v));
		if (!v)
			goto fail;
		files = v;
		capfiles = cap;
	}
	*f = (struct sim_file){ .fd = fd, .kdev = (uint64_t)st.st_dev, .kino = (uint64_t)st.st_ino,
				.gen = gen, .created = created, .gidx = gidx };
	files[nfiles++] = f;
	return f;
fail:
	free(f);
	return NULL;
}

static void file_close(struct sim_file *f)
{
	for (size_t i = 0; i < nfiles; i++)
		if (files[i] == f) {
			files[i] = files[--nfiles];
			break;
		}
	close(f->fd);
	free(f);
}

static struct sim_file *file_find(uint64_t kdev, uint64_t kino)
{
	for (size_t i = 0; i < nfiles; i++)
		if (files[i]->kdev == kdev && files[i]->kino == kino && files[i]->gen == gen)
			return files[i];
	return NULL;
}

static struct sim_file *own_file(size_t need)
{
	if (own && need <= FILE_SPAN - own->next)
		return own;
	int k = -1, fd = sim_group_new_file(&k);
	if (fd == -2) {
		char name[32];
		snprintf(name, sizeof(name), "simdev-%s", sim_lib_name);
		fd = memfd_create(name, MFD_CLOEXEC);
		k = -1;
	}
	if (fd < 0)
		return NULL;
	struct sim_file *f = ftruncate(fd, (off_t)FILE_SPAN) ? NULL : file_add(fd, true, k);
	if (!f) {
		close(fd);
		return NULL;
	}
	own = f;
	return f;
}

/* Whether fd is a memory file of this simdev library: "/memfd:simdev-cuda (deleted)", or a
 * group member's "/dev/shm/simdev-cuda-UID-NAME@PID.START.K". */
static bool is_store_file(int fd)
{
	char path[64], link[512], want[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = 0;
	int k = snprintf(want, sizeof(want), "/memfd:simdev-%s", sim_lib_name);
	if (!strncmp(link, want, (size_t)k) && (link[k] == 0 || link[k] == ' '))
		return true;
	k = snprintf(want, sizeof(want), "/dev/shm/simdev-%s-", sim_lib_name);
	return !strncmp(link, want, (size_t)k) && strchr(link + k, '@');
}

/* ---- allocations ---- */

static void mem_link(struct sim_mem *m)
{
	m->next = mems;
	m->prev = NULL;
	if (mems)
		mems->prev = m;
	mems = m;
}

static void mem_unlink(struct sim_mem *m)
{
	if (m->prev)
		m->prev->next = m->next;
	else
		mems = m->next;
	if (m->next)
		m->next->prev = m->prev;
}

static struct sim_mem *mem_find(const struct sim_file *f, uint64_t off)
{
	for (struct sim_mem *m = mems; m; m = m->next)
		if (m->file == f && m->off == off && m->gen == gen)
			return m;
	return NULL;
}

static struct sim_key key_of(const struct sim_mem *m)
{
	return (struct sim_key){ .dev = m->file->kdev, .ino = m->file->kino, .off = m->off };
}

struct sim_mem *sim_mem_create(int dev, size_t size, enum sim_err *err)
{
	*err = SIM_E_OOM;
	if (!sim_charge(dev, size))
		return NULL;
	struct sim_file *f = own_file(span_of(size));
	struct sim_mem *m = f ? calloc(1, sizeof(*m)) : NULL;
	if (!m) {
		sim_uncharge(dev, size);
		return NULL;
	}
	*m = (struct sim_mem){ .file = f, .off = f->next, .size = size, .dev = dev,
			       .id = sim_next_id(), .users = 1, .gen = gen, .charged = true,
			       .obj = { .idx = -1 } };
	f->next += span_of(size);
	f->refs++;
	mem_link(m);
	*err = SIM_OK;
	return m;
}

/* Make m shareable: its header written, its holder lock taken and the group told. */
static enum sim_err share(struct sim_mem *m)
{
	if (m->gen != gen)
		return SIM_E_INVALID; /* inherited through fork: the parent's memory */
	if (m->shared)
		return SIM_OK;
	struct sim_header h = { .size = m->size, .id = m->id, .dev = m->dev, .creator = getpid() };
	memcpy(h.magic, header_magic, sizeof(h.magic));
	int fd = m->file->fd;
	if (pwrite(fd, &h, sizeof(h), (off_t)m->off) != (ssize_t)sizeof(h) ||
	    lock_byte(fd, F_RDLCK, m->off + LOCK_HOLDER))
		return SIM_E_OOM;
	struct sim_key k = key_of(m);
	if (!sim_group_share(&k, m->dev, m->size, m->file->gidx, fd, &m->obj)) {
		lock_byte(fd, F_UNLCK, m->off + LOCK_HOLDER);
		return SIM_E_OOM;
	}
	m->charged = false; /* the group's object counts it now */
	m->shared = true;
	return SIM_OK;
}

int sim_mem_export(struct sim_mem *m, enum sim_err *err)
{
	*err = share(m);
	if (*err)
		return -1;
	/* Not close-on-exec: the caller owns it and may hand it to a program it starts. */
	int fd = reopen(m->file->fd, 0);
	if (fd < 0 || lseek(fd, (off_t)m->off, SEEK_SET) < 0 ||
	    lock_byte(fd, F_RDLCK, m->off + LOCK_EXPORT)) {
		if (fd >= 0)
			close(fd);
		*err = SIM_E_OOM;
		return -1;
	}
	return fd;
}

enum sim_err sim_mem_ipc_handle(struct sim_mem *m, size_t asked, struct sim_ipc *h)
{
	enum sim_err e = share(m);
	if (e)
		return e;
	if (!m->alive_lock) {
		if (lock_byte(m->file->fd, F_RDLCK, m->off + LOCK_ALIVE))
			return SIM_E_OOM;
		m->alive_lock = true;
	}
	*h = (struct sim_ipc){ .pid = getpid(), .fd = m->file->fd, .kdev = m->file->kdev,
			       .kino = m->file->kino, .off = m->off, .size = asked, .id = m->id,
			       .dev = m->dev };
	memcpy(h->magic, "simdevI", 8);
	return SIM_OK;
}

/* Hold the allocation at `off` of the file that `desc` opens (fresh: a new description this call
 * may keep as the process's own; else one to reopen). want_id: the allocation's id (0: any);
 * need_alive: its creator must not have freed it (legacy IPC). */
static struct sim_mem *attach(int desc, bool fresh, uint64_t off, uint64_t want_id,
			      bool need_alive, enum sim_err *err)
{
	struct stat st;
	struct sim_mem *m = NULL;
	if (fstat(desc, &st)) {
		*err = SIM_E_INVALID;
		goto out;
	}
	struct sim_file *f = file_find((uint64_t)st.st_dev, (uint64_t)st.st_ino);
	bool new_file = !f;
	if (!f) {
		int fd = fresh ? desc : reopen(desc, O_CLOEXEC);
		f = fd >= 0 ? file_add(fd, false, -1) : NULL;
		if (!f) {
			if (fd >= 0)
				close(fd);
			*err = SIM_E_OOM;
			return NULL;
		}
		fresh = false; /* kept */
	}
	m = mem_find(f, off);
	if (m && need_alive && !sim_range_alive(f->fd, off)) {
		m = NULL; /* held here, but freed by its creator: the handle opens no more */
		*err = SIM_E_HANDLE;
		goto out;
	}
	if (m) {
		m->users++;
		*err = SIM_OK;
		goto out;
	}
	*err = SIM_E_HANDLE;
	struct sim_header h;
	m = calloc(1, sizeof(*m));
	if (!m || lock_byte(f->fd, F_RDLCK, off + LOCK_HOLDER)) {
		free(m);
		m = NULL;
		*err = SIM_E_OOM;
		goto drop_file;
	}
	/* Read now that our lock keeps it: the creator may have freed it just before. */
	if (pread(f->fd, &h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, header_magic, sizeof(h.magic)) || !h.size ||
	    (want_id && h.id != want_id) || (need_alive && !sim_range_alive(f->fd, off))) {
		lock_byte(f->fd, F_UNLCK, off + LOCK_HOLDER);
		free(m);
		m = NULL;
		goto drop_file;
	}
	*m = (struct sim_mem){ .file = f, .off = off, .size = h.size, .dev = h.dev, .id = h.id,
			       .users = 1, .gen = gen, .shared = true };
	f->refs++;
	struct sim_key k = key_of(m);
	sim_group_hold(&k, &m->obj);
	mem_link(m);
	*err = SIM_OK;
	goto out;
drop_file:
	if (new_file)
		file_close(f);
out:
	if (fresh)
		close(desc);
	return m;
}

/* Whether the open file description fd holds the export lock of the allocation at off. Only an
 * exported descriptor (or the same description passed on: SCM_RIGHTS, pidfd_getfd, dup) carries
 * an allocation; a new open of it (/proc/PID/fd/N) carries none, as a new open of the driver's
 * /dev/nvidiactl would not. The kernel lists a description's own locks in its fdinfo. */
static bool carries_export(int fd, uint64_t off)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	int f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return false;
	ssize_t n = read(f, buf, sizeof(buf) - 1);
	close(f);
	if (n <= 0)
		return false;
	buf[n] = 0;
	for (char *l = strstr(buf, "lock:"); l; l = strstr(l + 1, "lock:")) {
		char kind[16], mode[16], type[16], id[64];
		unsigned long long start, end;
		long pid;
		int num;
		/* "lock:\t1: OFDLCK ADVISORY  READ -1 00:01:360859 2 2" */
		if (sscanf(l, "lock: %d: %15s %15s %15s %ld %63s %llu %llu", &num, kind, mode, type,
			   &pid, id, &start, &end) == 8 &&
		    !strcmp(kind, "OFDLCK") && start == off + LOCK_EXPORT && end == start)
			return true;
	}
	return false;
}

struct sim_mem *sim_mem_import_fd(int fd, enum sim_err *err)
{
	struct stat st;
	struct sim_header h;
	*err = SIM_E_INVALID;
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || !is_store_file(fd))
		return NULL;
	off_t off = lseek(fd, 0, SEEK_CUR);
	if (off < 0 || pread(fd, &h, sizeof(h), off) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, header_magic, sizeof(h.magic)) || !h.size ||
	    !carries_export(fd, (uint64_t)off))
		return NULL;
	if (h.dev < 0 || h.dev >= sim_device_count()) {
		*err = SIM_E_UNSUPPORTED; /* a device this process does not have */
		return NULL;
	}
	struct sim_mem *m = attach(fd, false, (uint64_t)off, h.id, false, err);
	if (m == NULL && *err == SIM_E_HANDLE)
		*err = SIM_E_INVALID;
	return m;
}

struct sim_mem *sim_mem_open_ipc(const struct sim_ipc *h, enum sim_err *err)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
	/* Only a process that may look into the exporter's file descriptors (the same user) can. */
	int fd = open(path, O_RDWR | O_CLOEXEC);
	*err = SIM_E_HANDLE;
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || (uint64_t)st.st_dev != h->kdev || (uint64_t)st.st_ino != h->kino ||
	    !is_store_file(fd)) {
		close(fd); /* the exporter is gone, or that descriptor names another file now */
		return NULL;
	}
	return attach(fd, true, h->off, h->id, true, err);
}

int sim_mem_map(struct sim_mem *m, uintptr_t va, size_t size, size_t offset, int prot)
{
	void *p = mmap((void *)va, size, prot, MAP_SHARED | MAP_FIXED, m->file->fd,
		       (off_t)(m->off + header_size() + offset));
	return p == MAP_FAILED ? -1 : 0;
}

void sim_mem_put(struct sim_mem *m)
{
	if (--m->users)
		return;
	mem_unlink(m);
	struct sim_file *f = m->file;
	if (m->gen != gen) {
		/* Inherited through fork: the parent's memory, which it frees itself. */
		if (m->charged)
			sim_uncharge_inherited(m->dev, m->size);
	} else if (!m->shared) {
		sim_range_punch(f->fd, m->off, m->size);
		sim_uncharge(m->dev, m->size);
	} else {
		if (m->alive_lock)
			lock_byte(f->fd, F_UNLCK, m->off + LOCK_ALIVE);
		lock_byte(f->fd, F_UNLCK, m->off + LOCK_HOLDER);
		struct sim_key k = key_of(m);
		if (sim_group_drop(&m->obj, f->fd, &k))
			sim_range_punch(f->fd, m->off, m->size);
	}
	if (--f->refs == 0 && !f->created)
		file_close(f);
	free(m);
}

void sim_store_forked(void)
{
	gen++;
	own = NULL; /* the parent's file and its descriptor are shared with the parent */
}
