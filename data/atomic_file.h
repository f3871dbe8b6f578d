/* atomic_file.h - files written whole or not at all: a temporary next to
 * the file ("PATH.tmp.PID.N", the name a run folder's clean-up knows),
 * renamed over it once everything reached the disk.  A crash, a full disk
 * or a failed write leaves the file as it was.  Every writer of a file a
 * user may already have goes through it: checkpoints (io/safetensors.c),
 * a run's logs, vocab.txt, saved data sets, heatmaps and plots.  Not part
 * of the API. */
#ifndef AG_ATOMIC_FILE_H
#define AG_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum { AG__TEMP_PATH_MAX = 4096 + 48 };

/* A new temporary file next to path, open for writing: its descriptor, or
 * -1 with errno set (ENAMETOOLONG where its name would not fit n bytes);
 * its name in tmp. */
int ag__temp_open(const char *path, char *tmp, size_t n);

/* Makes a rename into path's folder durable: 0, or errno.  A file system
 * that cannot sync a folder (EINVAL) makes it as durable as it can: 0. */
int ag__sync_folder(const char *path);

typedef struct {
    FILE *f;          /* what to write to */
    const char *path; /* the caller's, until ag__atomic_close */
    bool in_place;    /* path is a device or a pipe (/dev/stdout): nothing there to keep */
    char tmp[AG__TEMP_PATH_MAX];
} ag__atomic_file;

/* 0, and a->f to write to; or errno, and nothing created. */
int ag__atomic_open(ag__atomic_file *a, const char *path);

/* What was written replaces path, or path stays as it was: 0, or the errno
 * of the first failure (a full disk often shows only here, when the
 * buffered bytes are written), the temporary removed. */
int ag__atomic_close(ag__atomic_file *a);

#endif
