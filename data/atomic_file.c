/* atomic_file.c - files written whole or not at all (atomic_file.h). */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ag__temp_open(const char *path, char *tmp, size_t n) {
    static unsigned counter; /* a process's temporaries differ by it, and by pid from other processes' */
    for (int attempt = 0; attempt < 100; attempt++) {
        int len = snprintf(tmp, n, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
        if (len < 0 || (size_t)len >= n) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

int ag__sync_folder(const char *path) {
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir) return ENOMEM;
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int rc = 0, fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL)) rc = errno;
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

int ag__atomic_open(ag__atomic_file *a, const char *path) {
    *a = (ag__atomic_file){.path = path};
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) return EISDIR;
        a->in_place = true; /* a device or a pipe: a rename would replace the node itself */
        a->f = fopen(path, "w");
        return a->f ? 0 : errno;
    }
    int fd = ag__temp_open(path, a->tmp, sizeof a->tmp);
    if (fd < 0) return errno;
    a->f = fdopen(fd, "w");
    if (a->f) return 0;
    int e = errno;
    close(fd);
    unlink(a->tmp);
    return e;
}

int ag__atomic_close(ag__atomic_file *a) {
    errno = 0;
    int rc = fflush(a->f) != 0 || ferror(a->f) ? (errno ? errno : EIO) : 0;
    if (!rc && !a->in_place && fsync(fileno(a->f)) != 0) rc = errno;
    if (fclose(a->f) != 0 && !rc) rc = errno ? errno : EIO;
    a->f = NULL;
    if (a->in_place) return rc;
    if (!rc && rename(a->tmp, a->path) != 0) rc = errno;
    if (rc) unlink(a->tmp);
    else rc = ag__sync_folder(a->path);
    return rc;
}
