/* Device capacity (SIMDEV_MEMORY per device). A process counts its own device memory, in its own
 * memory; with SIMDEV_SHARED=NAME the processes of one user that give the same NAME count in one
 * table, a file in /dev/shm, so that they draw on one capacity per device and cuMemGetInfo answers
 * for all of them. Memory more than one process may hold (exported, imported, IPC-opened) is one
 * object in the table, counted once, until no process, mapping or exported file descriptor holds
 * it (the locks of sim_store.c say so). A member keeps its memory in files beside the table
 * (NAME@PID.START.K), so that any member can look at an object's locks even after every process
 * that held it through simdev is gone (an exported descriptor may still be open). A member that
 * exits or is killed is found by its pid and start time: what it held alone comes back and its
 * files are emptied, then removed once no object lives in them. The table's lock is a robust
 * mutex: a member killed while holding it costs the next one a repair, not a deadlock; every wait
 * for it has a deadline. Without SIMDEV_SHARED the same table lives in private memory with one
 * member and memory lives in memfds. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sim_internal.h"

#define GROUP_MAGIC 0x31707267766d6973ULL /* "simvgrp1" */
#define GROUP_MEMBERS 64   /* one bit each in an object's holders */
#define GROUP_OBJECTS 2048 /* shared allocations at once */
#define WAIT_MS 10000      /* the longest wait for the group's lock or for joining it */

struct gmember {
	int32_t pid; /* 0: a free slot */
	int32_t pad;
	uint64_t start;                 /* the pid's start time: a reused pid is not this member */
	uint32_t files;                 /* memory files it made: NAME@PID.START.0 .. files-1 */
	uint32_t pad2;
	uint64_t used[SIM_MAX_DEVICES]; /* memory it holds alone */
	uint64_t held[SIM_MAX_DEVICES]; /* shared objects it holds (its SIMDEV_STATS bytes) */
};

struct gobject {
	uint64_t gen; /* 0: a free slot */
	struct sim_key key;
	uint64_t size;
	int32_t dev;
	int32_t pad;
	uint64_t holders; /* members that hold it */
	/* Its file: the creator's NAME@PID.START.FILE, or (no group) this process's descriptor. */
	int32_t owner_pid;
	uint32_t owner_file;
	uint64_t owner_start;
	int32_t owner_fd;
	int32_t pad2;
};

struct gstate {
	uint64_t magic;
	uint64_t capacity;
	pthread_mutex_t lock;
	uint64_t next_gen;
	uint64_t total[SIM_MAX_DEVICES];
	struct gmember members[GROUP_MEMBERS];
	struct gobject objects[GROUP_OBJECTS];
};

static struct gstate *G;
static bool shared;
static int me = -1;     /* my member slot */
static pid_t me_pid;    /* the process that took it (a forked child takes its own) */
static int shm_fd = -1; /* shared: my description of the file; holds my membership lock */
static pid_t shm_pid;   /* the process that opened shm_fd */
static char shm_path[160];
static char shm_dir[] = "/dev/shm";
static char file_prefix[160]; /* shm_path's base name and '@': the members' memory files */
static const char *group_name;
static size_t peak_bytes;
static unsigned stall_ms;
static bool said_timeout, said_full;

/* ---- helpers ---- */

static void sleep_ms(unsigned ms)
{
	struct timespec t = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

/* An OFD lock operation on byte `at` of fd: 0 done (GETLK: 0 free, 1 held by another), -1 error. */
static int ofd(int fd, int cmd, short type, off_t at)
{
	struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
	if (fcntl(fd, cmd, &l))
		return -1;
	return cmd == F_OFD_GETLK ? l.l_type != F_UNLCK : 0;
}

/* Start time of pid (field 22 of /proc/PID/stat); 0 when it is gone or a zombie (its memory and
 * file descriptors are released when it exits, before it is reaped). */
static uint64_t start_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
		return 0;
	p += 2; /* field 3, the state */
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return 0;
		p++;
	}
	return strtoull(p, NULL, 10);
}

/* Bytes of the table's file: 0 a read lock per member's description (membership), 1 held while
 * joining or leaving, 2 + slot a read lock while that slot's member lives. */
#define MEMBERSHIP_BYTE 0
#define JOIN_BYTE 1
#define SLOT_BYTE(slot) (2 + (slot))

/* A member lives while its process does (pid and start time; a zombie has released everything)
 * and holds its slot's lock, which the kernel drops when it exits, is killed or execs. */
static bool member_alive(int slot)
{
	const struct gmember *m = &G->members[slot];
	if (!m->pid)
		return false;
	if (slot == me && me_pid == getpid())
		return true;
	if (!shared)
		return false;
	if (kill(m->pid, 0) && errno == ESRCH)
		return false;
	return start_of(m->pid) == m->start && ofd(shm_fd, F_OFD_GETLK, F_WRLCK, SLOT_BYTE(slot)) == 1;
}

static uint64_t bit(int slot)
{
	return (uint64_t)1 << slot;
}

/* ---- keeping the table right (group lock held) ---- */

static void clean_file(int32_t pid, uint64_t start, uint32_t k);

/* A member that left or died: what it held alone comes back, its holds end, its files are
 * emptied (and removed when no object lives in them). */
static void free_member(int slot)
{
	struct gmember m = G->members[slot];
	for (int d = 0; d < SIM_MAX_DEVICES; d++)
		G->total[d] -= m.used[d] < G->total[d] ? m.used[d] : G->total[d];
	for (int i = 0; i < GROUP_OBJECTS; i++)
		G->objects[i].holders &= ~bit(slot);
	memset(&G->members[slot], 0, sizeof(m));
	for (uint32_t k = 0; shared && k < m.files; k++)
		clean_file(m.pid, m.start, k);
}

/* Members that exited or were killed: what they held alone comes back, their holds end. */
static void drop_dead_members(void)
{
	for (int i = 0; shared && i < GROUP_MEMBERS; i++)
		if (G->members[i].pid && !member_alive(i))
			free_member(i);
}

static void file_path(char *out, size_t cap, int32_t pid, uint64_t start, uint32_t k)
{
	snprintf(out, cap, "%s/%s%d.%llu.%u", shm_dir, file_prefix, (int)pid,
		 (unsigned long long)start, k);
}

/* A new description of an object's file, or -1 when the file is gone. */
static int object_file(const struct gobject *o)
{
	char path[256];
	if (shared)
		file_path(path, sizeof(path), o->owner_pid, o->owner_start, o->owner_file);
	else
		snprintf(path, sizeof(path), "/proc/self/fd/%d", (int)o->owner_fd);
	/* A group's files are plain names (no symbolic link is followed); /proc/self/fd is one. */
	int fd = open(path, O_RDWR | O_CLOEXEC | (shared ? O_NOFOLLOW : 0));
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) || (uint64_t)st.st_dev != o->key.dev ||
			(uint64_t)st.st_ino != o->key.ino)) {
		close(fd); /* that name or descriptor is another file now */
		fd = -1;
	}
	return fd;
}

static bool same_file(const struct gobject *o, int32_t pid, uint64_t start, uint32_t k)
{
	return o->gen && o->owner_pid == pid && o->owner_start == start && o->owner_file == k;
}

static int by_offset(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* A memory file whose member is gone: removed when no object lives in it, else emptied but for
 * its objects (what the member held alone must not stay in host memory). */
static void clean_file(int32_t pid, uint64_t start, uint32_t k)
{
	static uint64_t ranges[2 * GROUP_OBJECTS];
	size_t n = 0;
	for (int i = 0; i < GROUP_OBJECTS; i++) {
		const struct gobject *o = &G->objects[i];
		if (same_file(o, pid, start, k)) {
			ranges[2 * n] = o->key.off;
			ranges[2 * n + 1] = o->key.off + sim_store_span(o->size);
			n++;
		}
	}
	char path[256];
	file_path(path, sizeof(path), pid, start, k);
	if (!n) {
		unlink(path);
		return;
	}
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	qsort(ranges, n, 2 * sizeof(uint64_t), by_offset);
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		if (ranges[2 * i] > at)
			sim_punch_bytes(fd, at, ranges[2 * i] - at);
		if (ranges[2 * i + 1] > at)
			at = ranges[2 * i + 1];
	}
	sim_punch_bytes(fd, at, sim_store_file_span() - at);
	close(fd);
}

/* An object nobody holds any more; its file goes too when its member is gone and it was the
 * file's last object. */
static void free_object(struct gobject *o)
{
	G->total[o->dev] -= o->size < G->total[o->dev] ? o->size : G->total[o->dev];
	struct gobject was = *o;
	memset(o, 0, sizeof(*o));
	if (!shared)
		return;
	for (int i = 0; i < GROUP_MEMBERS; i++)
		if (G->members[i].pid == was.owner_pid && G->members[i].start == was.owner_start)
			return; /* its member lives and empties the file itself */
	clean_file(was.owner_pid, was.owner_start, was.owner_file);
}

/* An object no member holds may still be held by an exported descriptor or a process outside
 * the group: its locks say so. Freed (and its bytes punched) when nobody does. */
static void reap_orphans(void)
{
	for (int i = 0; i < GROUP_OBJECTS; i++) {
		struct gobject *o = &G->objects[i];
		if (!o->gen || o->holders)
			continue;
		int fd = object_file(o);
		if (fd >= 0 && sim_range_held(fd, o->key.off)) {
			close(fd);
			continue;
		}
		if (fd >= 0) {
			sim_range_punch(fd, o->key.off, o->size);
			close(fd);
		}
		free_object(o);
	}
}

/* After a member died holding the lock: its half-done change is undone by counting again. */
static void repair(void)
{
	drop_dead_members();
	memset(G->total, 0, sizeof(G->total));
	for (int i = 0; i < GROUP_MEMBERS; i++) {
		struct gmember *m = &G->members[i];
		memset(m->held, 0, sizeof(m->held));
		for (int d = 0; m->pid && d < SIM_MAX_DEVICES; d++)
			G->total[d] += m->used[d];
	}
	for (int i = 0; i < GROUP_OBJECTS; i++) {
		struct gobject *o = &G->objects[i];
		if (!o->gen)
			continue;
		if (o->dev < 0 || o->dev >= SIM_MAX_DEVICES) {
			memset(o, 0, sizeof(*o));
			continue;
		}
		G->total[o->dev] += o->size;
		for (int m = 0; m < GROUP_MEMBERS; m++)
			if (o->holders & bit(m))
				G->members[m].held[o->dev] += o->size;
	}
}

/* ---- the lock ---- */

/* Take a member slot (a process new to the group, or a forked child). */
static bool claim_slot(void)
{
	if (shm_pid != getpid())
		return false; /* a forked child that could not open the table for itself */
	drop_dead_members();
	for (int i = 0; i < GROUP_MEMBERS; i++)
		if (!G->members[i].pid) {
			struct gmember *m = &G->members[i];
			if (ofd(shm_fd, F_OFD_SETLK, F_RDLCK, SLOT_BYTE(i)))
				return false;
			memset(m, 0, sizeof(*m));
			m->pid = getpid();
			m->start = start_of(m->pid);
			me = i;
			me_pid = m->pid;
			return true;
		}
	fprintf(stderr, "simdev: SIMDEV_SHARED=%s already has %d live members; this process is not "
		"counted\n", group_name, GROUP_MEMBERS);
	return false;
}

static bool glock(void)
{
	if (!shared) {
		pthread_mutex_lock(&G->lock);
		return true;
	}
#ifdef __SANITIZE_THREAD__
	/* ThreadSanitizer (GCC 12) does not intercept pthread_mutex_clocklock (a lock taken that
	 * way is invisible to it and every access under it would be reported), and it takes a
	 * timedlock that returns EOWNERDEAD (a member killed holding the lock, which the sharing
	 * soak does) for a lock not taken, then reports the unlock. Its trylock it follows in both
	 * cases: under it the deadline is kept by trying every half millisecond. */
	int r;
	for (long waited_us = 0;; waited_us += 500) {
		r = pthread_mutex_trylock(&G->lock);
		if (r != EBUSY)
			break;
		if (waited_us >= WAIT_MS * 1000L) {
			r = ETIMEDOUT;
			break;
		}
		usleep(500);
	}
#else
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += WAIT_MS / 1000;
	int r = pthread_mutex_clocklock(&G->lock, CLOCK_MONOTONIC, &dl);
#endif
	bool dead_owner = r == EOWNERDEAD;
	if (dead_owner) {
		pthread_mutex_consistent(&G->lock);
		r = 0;
	}
	if (r) {
		if (!said_timeout)
			fprintf(stderr, "simdev: SIMDEV_SHARED=%s: the group's lock was not free within "
				"%d s (%s); the call fails\n", group_name, WAIT_MS / 1000, strerror(r));
		said_timeout = true;
		return false;
	}
	if ((me < 0 || me_pid != getpid()) && !claim_slot()) {
		pthread_mutex_unlock(&G->lock);
		return false;
	}
	if (dead_owner)
		repair();
	return true;
}

static void gunlock(void)
{
	pthread_mutex_unlock(&G->lock);
}

/* ---- what a process holds ---- */

static size_t my_live(void)
{
	size_t n = 0;
	for (int d = 0; d < SIM_MAX_DEVICES; d++)
		n += shared ? G->members[me].used[d] + G->members[me].held[d] : G->total[d];
	return n;
}

static void note_peak(void)
{
	size_t n = my_live();
	if (n > peak_bytes)
		peak_bytes = n;
}

static bool fits(int dev, size_t bytes)
{
	return G->total[dev] <= G->capacity && bytes <= G->capacity - G->total[dev];
}

bool sim_charge(int dev, size_t bytes)
{
	if (dev < 0 || dev >= sim_device_count() || !glock())
		return false;
	bool ok = fits(dev, bytes);
	if (!ok) {
		/* Memory of members that died, or that nobody holds any more, comes back first. */
		drop_dead_members();
		reap_orphans();
		ok = fits(dev, bytes);
	}
	if (ok) {
		G->members[me].used[dev] += bytes;
		G->total[dev] += bytes;
		note_peak();
	}
	if (stall_ms)
		sleep_ms(stall_ms); /* SIMDEV_LOCK_STALL: a test kills a member holding the lock */
	gunlock();
	return ok;
}

void sim_uncharge(int dev, size_t bytes)
{
	if (!glock())
		return; /* counted until this member exits */
	struct gmember *m = &G->members[me];
	size_t n = bytes < m->used[dev] ? bytes : m->used[dev];
	m->used[dev] -= n;
	G->total[dev] -= n < G->total[dev] ? n : G->total[dev];
	gunlock();
}

void sim_uncharge_inherited(int dev, size_t bytes)
{
	if (!shared)
		sim_uncharge(dev, bytes);
}

bool sim_used(int dev, size_t *out)
{
	if (dev < 0 || dev >= SIM_MAX_DEVICES || !glock())
		return false;
	drop_dead_members();
	reap_orphans();
	*out = G->total[dev];
	gunlock();
	return true;
}

/* ---- shared objects ---- */

static struct gobject *free_slot(void)
{
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < GROUP_OBJECTS; i++)
			if (!G->objects[i].gen)
				return &G->objects[i];
		drop_dead_members();
		reap_orphans();
	}
	return NULL;
}

bool sim_group_share(const struct sim_key *k, int dev, size_t size, int file, int fd,
		     struct sim_objref *out)
{
	if (!glock())
		return false;
	struct gobject *o = free_slot();
	if (o) {
		*o = (struct gobject){ .gen = G->next_gen++, .key = *k, .size = size, .dev = dev,
				       .holders = bit(me), .owner_pid = G->members[me].pid,
				       .owner_start = G->members[me].start,
				       .owner_file = (uint32_t)file, .owner_fd = fd };
		struct gmember *m = &G->members[me];
		m->used[dev] -= size < m->used[dev] ? size : m->used[dev];
		m->held[dev] += size;
		*out = (struct sim_objref){ .idx = (int)(o - G->objects), .gen = o->gen };
	} else if (!said_full) {
		said_full = true;
		fprintf(stderr, "simdev: the table of shared allocations is full (%d); an export "
			"fails\n", GROUP_OBJECTS);
	}
	gunlock();
	return o != NULL;
}

void sim_group_hold(const struct sim_key *k, struct sim_objref *out)
{
	out->idx = -1;
	if (!glock())
		return;
	for (int i = 0; i < GROUP_OBJECTS; i++) {
		struct gobject *o = &G->objects[i];
		if (!o->gen || memcmp(&o->key, k, sizeof(*k)))
			continue;
		if (!(o->holders & bit(me))) {
			o->holders |= bit(me);
			G->members[me].held[o->dev] += o->size;
		}
		*out = (struct sim_objref){ .idx = i, .gen = o->gen };
		note_peak();
		break;
	}
	gunlock();
}

bool sim_group_drop(const struct sim_objref *ref, int fd, const struct sim_key *k)
{
	if (!glock())
		return false; /* keep the bytes: nothing is freed that someone may still use */
	bool nobody;
	struct gobject *o = ref->idx >= 0 ? &G->objects[ref->idx] : NULL;
	if (o && o->gen == ref->gen) {
		if (o->holders & bit(me)) {
			o->holders &= ~bit(me);
			struct gmember *m = &G->members[me];
			m->held[o->dev] -= o->size < m->held[o->dev] ? o->size : m->held[o->dev];
		}
		nobody = !o->holders && !sim_range_held(fd, k->off);
		if (nobody)
			free_object(o);
	} else {
		nobody = !sim_range_held(fd, k->off); /* memory of a process outside the group */
	}
	gunlock();
	return nobody;
}

int sim_group_new_file(int *k)
{
	if (!shared)
		return -2;
	if (!glock())
		return -1;
	struct gmember *m = &G->members[me];
	char path[256];
	*k = (int)m->files;
	file_path(path, sizeof(path), m->pid, m->start, m->files++); /* counted first: cleaned */
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	gunlock();
	return fd;
}

void sim_group_bytes(size_t *live, size_t *peak)
{
	*live = 0;
	*peak = peak_bytes;
	if (!G || !glock())
		return;
	*live = my_live();
	*peak = peak_bytes;
	gunlock();
}

/* ---- joining and leaving ---- */

/* Every memory file of the group: a new group starts without a crashed one's, the last member
 * leaves none. */
static void remove_files(void)
{
	DIR *d = opendir(shm_dir);
	if (!d)
		return;
	size_t n = strlen(file_prefix);
	for (struct dirent *e; (e = readdir(d));) {
		char path[512];
		if (strncmp(e->d_name, file_prefix, n))
			continue;
		snprintf(path, sizeof(path), "%s/%s", shm_dir, e->d_name);
		unlink(path);
	}
	closedir(d);
}

/* The join/leave lock, waited for until the deadline. */
static bool join_lock(int fd)
{
	for (unsigned waited = 0; ofd(fd, F_OFD_SETLK, F_WRLCK, JOIN_BYTE); waited++) {
		if ((errno != EAGAIN && errno != EACCES) || waited >= WAIT_MS)
			return false;
		sleep_ms(1);
	}
	return true;
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

/* Open (or make) the group's file and take membership (its lock dies with the process); the join
 * lock makes the first member initialize the table and the last one remove the files, alone. */
static const char *join(struct sim_config *cfg)
{
	size_t size = sim_round_up(sizeof(struct gstate), 4096);
	snprintf(file_prefix, sizeof(file_prefix), "simdev-%s-%u-%s@", sim_lib_name,
		 (unsigned)geteuid(), group_name);
	snprintf(shm_path, sizeof(shm_path), "%s/%.*s", shm_dir, (int)strlen(file_prefix) - 1,
		 file_prefix);
	for (int attempt = 0; attempt < 100; attempt++) {
		int fd = open(shm_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return strerror(errno);
		struct stat st;
		if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
		    (st.st_mode & 077)) {
			close(fd);
			return "the file is not this user's with mode 0600";
		}
		if (!join_lock(fd)) {
			close(fd);
			return "its join lock was not free in time";
		}
		if (fstat(fd, &st) || st.st_nlink == 0) {
			close(fd); /* the last member removed it meanwhile: make a new one */
			continue;
		}
		bool fresh = ofd(fd, F_OFD_GETLK, F_WRLCK, MEMBERSHIP_BYTE) == 0; /* no live member */
		if (fresh ? ftruncate(fd, 0) || ftruncate(fd, (off_t)size) : (size_t)st.st_size != size) {
			close(fd);
			return fresh ? "cannot size the file" : "the file was made by another simdev";
		}
		struct gstate *g = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (g == MAP_FAILED) {
			close(fd);
			return "cannot map the file";
		}
		if (fresh) {
			remove_files(); /* of a group whose members all died */
			pthread_mutexattr_t a;
			pthread_mutexattr_init(&a);
			pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
			pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
			pthread_mutex_init(&g->lock, &a);
			pthread_mutexattr_destroy(&a);
			g->capacity = cfg->memory;
			g->next_gen = 1;
			g->magic = GROUP_MAGIC;
		} else if (g->magic != GROUP_MAGIC) {
			munmap(g, size);
			close(fd);
			return "the file was made by another simdev";
		}
		ofd(fd, F_OFD_SETLK, F_RDLCK, MEMBERSHIP_BYTE);
		ofd(fd, F_OFD_SETLK, F_UNLCK, JOIN_BYTE);
		G = g;
		shared = true;
		shm_fd = fd;
		shm_pid = getpid();
		if (g->capacity != cfg->memory) {
			fprintf(stderr, "simdev: SIMDEV_SHARED=%s: the group's capacity is %llu bytes per "
				"device (its first member's SIMDEV_MEMORY); this process uses it\n",
				group_name, (unsigned long long)g->capacity);
			cfg->memory = g->capacity;
		}
		return NULL;
	}
	return "it kept being removed";
}

/* After every other destructor (SIMDEV_STATS is written first): the last member removes the
 * file. A member that dies without this is found dead by the others. */
__attribute__((destructor(101))) static void leave(void)
{
	if (!shared || shm_pid != getpid())
		return;
	if (me >= 0 && me_pid == getpid() && glock()) {
		free_member(me);
		ofd(shm_fd, F_OFD_SETLK, F_UNLCK, SLOT_BYTE(me));
		me = -1;
		gunlock();
	}
	if (join_lock(shm_fd)) {
		ofd(shm_fd, F_OFD_SETLK, F_UNLCK, MEMBERSHIP_BYTE);
		if (ofd(shm_fd, F_OFD_GETLK, F_WRLCK, MEMBERSHIP_BYTE) == 0) {
			unlink(shm_path);
			remove_files();
		}
		ofd(shm_fd, F_OFD_SETLK, F_UNLCK, JOIN_BYTE);
	}
}

/* fork: a private table is copied with its lock free and the child as its member (it inherits
 * the counters); a shared one is joined again by the child at its next call. */
static void fork_prepare(void)
{
	if (!shared)
		pthread_mutex_lock(&G->lock);
}

static void fork_parent(void)
{
	if (!shared)
		pthread_mutex_unlock(&G->lock);
}

static void fork_child(void)
{
	sim_store_forked();
	if (!shared) {
		pthread_mutex_init(&G->lock, NULL);
		me_pid = getpid();
		G->members[me].pid = me_pid;
		return;
	}
	/* The table's description (and its locks) is the parent's: take one of the child's own, so
	 * that the parent's slot dies with the parent; the child takes a slot at its next call. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", shm_fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0 && !ofd(fd, F_OFD_SETLK, F_RDLCK, MEMBERSHIP_BYTE) && dup3(fd, shm_fd, O_CLOEXEC) >= 0)
		shm_pid = getpid();
	if (fd >= 0)
		close(fd);
}

static void private_table(const struct sim_config *cfg)
{
	G = calloc(1, sizeof(*G));
	if (!G) {
		fprintf(stderr, "simdev: no memory for the device table\n");
		abort();
	}
	pthread_mutex_init(&G->lock, NULL);
	G->capacity = cfg->memory;
	G->next_gen = 1;
	me = 0;
	me_pid = getpid();
	G->members[0].pid = me_pid;
}

void sim_group_init(struct sim_config *cfg)
{
	stall_ms = cfg->lock_stall_ms;
	group_name = cfg->shared;
	const char *why = NULL;
	if (group_name && !valid_name(group_name))
		why = "a name is 1-64 letters, digits, '.', '_' or '-'";
	else if (group_name)
		why = join(cfg);
	if (why) {
		fprintf(stderr, "simdev: SIMDEV_SHARED=%s: cannot join the group (%s); this process "
			"counts its memory alone\n", group_name, why);
		shared = false;
	}
	if (!shared)
		private_table(cfg);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void sim_group_peak_reset(void)
{
	if (!G || !glock()) {
		peak_bytes = 0;
		return;
	}
	peak_bytes = my_live();
	gunlock();
}
