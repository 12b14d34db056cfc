/*
 * spool_dir.c - the spool's directory: its files of ours listed and
 * counted (the gauges: the directory is the truth), their locks and
 * renames, and the room left for more (--spool-max, the file system's
 * free space). The I/O thread's, but spool_room(), which relay threads
 * ask and which makes no system call.
 */
#include <sys/types.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "relay/ctx.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

/*
 * May the spool take more: under --spool-max, and the file system keeps
 * ZP_SPOOL_RESERVE free (for us: f_bavail). Every writer asks before
 * each read: the free space is what the I/O thread found last (it looks
 * every SPOOL_FREE_MS, spool_free_cb), less what the spool wrote since.
 * No system call: a relay thread asks.
 */
int
spool_room(struct zp_spool *sp)
{
	uint64_t	freeb, bytes, base;

	if ((bytes = spool_ld(&sp->bytes)) >= sp->ctx->cfg->spool_max)
		return 0;
	freeb = spool_ld(&sp->free_bytes);
	base = spool_ld(&sp->free_base);
	bytes = bytes > base ? bytes - base : 0;
	return freeb > bytes && freeb - bytes >= ZP_SPOOL_RESERVE;
}

/* Look at the free space of DIR's file system (the I/O thread). */
void
spool_free_look(struct zp_spool *sp)
{
	struct statvfs	vfs;
	uint64_t	bytes = spool_ld(&sp->bytes);

	/* Unknown: the writes will say. */
	__atomic_store_n(&sp->free_bytes, fstatvfs(sp->dirfd, &vfs) == -1 ?
	    UINT64_MAX : (uint64_t)vfs.f_bavail * vfs.f_frsize,
	    __ATOMIC_RELAXED);
	__atomic_store_n(&sp->free_base, bytes, __ATOMIC_RELAXED);
}

void
spool_free_cb(evutil_socket_t fd, short what, void *arg)
{
	spool_free_look(arg);
}

/*
 * Sift v[i] down the max-heap of v's first n names (strcmp order).
 */
static void
names_sift(char **v, size_t i, size_t n)
{
	size_t	 c;
	char	*t;

	while ((c = 2 * i + 1) < n) {
		if (c + 1 < n && strcmp(v[c + 1], v[c]) > 0)
			c++;
		if (strcmp(v[i], v[c]) >= 0)
			break;
		t = v[i];
		v[i] = v[c];
		v[c] = t;
		i = c;
	}
}

/*
 * Sort the n names of v in strcmp order, in place (a heap sort). Not
 * qsort(3): glibc's merges in a buffer it sizes by
 * sysconf(_SC_PHYS_PAGES), i.e. sysinfo(2), past 1 KiB of pointers,
 * and the scan runs under the sandbox; this takes no memory and makes
 * no system call, whatever the libc.
 */
static void
names_sort(char **v, size_t n)
{
	size_t	 i;
	char	*t;

	for (i = n / 2; i-- > 0;)
		names_sift(v, i, n);
	while (n > 1) {
		n--;
		t = v[0];
		v[0] = v[n];
		v[n] = t;
		names_sift(v, 0, n);
	}
}

void
spool_names_clear(struct zp_spool *sp)
{
	size_t	i;

	for (i = 0; i < sp->nnames; i++)
		free(sp->names[i]);
	sp->nnames = 0;
}

/*
 * Read DIR's files of ours into sp->names, sorted, and count them and
 * their bytes into the gauges: the directory is the truth (a takeover's
 * old zproxy may still write and send there, and delete what it sent).
 * Returns 0 or -1.
 */
int
spool_scan(struct zp_spool *sp)
{
	struct dirent	*de;
	struct stat	 st;
	DIR		*dir;
	char		**v;
	uint64_t	 bytes = 0, files = 0;
	int		 fd;

	spool_names_clear(sp);
	if ((fd = openat(sp->dirfd, ".", O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1)
		return -1;
	if ((dir = fdopendir(fd)) == NULL) {
		close(fd);
		return -1;
	}
	while ((de = readdir(dir)) != NULL) {
		if (!spool_name_ours(spool_name_suffix(de->d_name)) ||
		    strlen(de->d_name) >= ZP_SPOOL_NAME_MAX)
			continue;
		if (sp->nnames == sp->cap) {
			size_t	ncap = sp->cap ? sp->cap * 2 : 64;

			if ((v = realloc(sp->names, ncap * sizeof(*v))) ==
			    NULL)
				break;
			sp->names = v;
			sp->cap = ncap;
		}
		if ((sp->names[sp->nnames] = strdup(de->d_name)) == NULL)
			break;
		sp->nnames++;
		if (fstatat(sp->dirfd, de->d_name, &st,
		    AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
			bytes += (uint64_t)st.st_size;
			files++;
		}
	}
	closedir(dir);
	names_sort(sp->names, sp->nnames);
	__atomic_store_n(&sp->bytes, bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&sp->files, files, __ATOMIC_RELAXED);
	return 0;
}

/*
 * Take the lock of a spool file: its writer holds it while it writes, a
 * sender while it sends (another zproxy's too, during a takeover), and a
 * dead process holds none. Returns 0, or -1 (EWOULDBLOCK: someone has
 * it).
 */
int
spool_file_lock(int fd)
{
	return flock(fd, LOCK_EX | LOCK_NB);
}

/* Rename DIR/name to the same name with another suffix. */
int
spool_rename(struct zp_spool *sp, const char *name, const char *suffix)
{
	char	to[ZP_SPOOL_NAME_MAX + 16];
	size_t	stem = (size_t)(strrchr(name, '.') - name);

	if (snprintf(to, sizeof(to), "%.*s.%s", (int)stem, name, suffix) >=
	    (int)sizeof(to))
		return -1;
	return renameat(sp->dirfd, name, sp->dirfd, to);
}
