/* text.c - what every reader in data/ stands on: the error convention,
 * growable arrays, and lines of a file (or of bytes in memory) of any
 * length up to a cap, with the checks every format shares (carriage
 * returns inside a line, a UTF-8 byte order mark, control bytes). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define AG_CHUNK_BYTES ((size_t)1 << 16)

/* ---- errors and growth ------------------------------------------------------- */

int ag__data_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int ag__data_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return AG_DATA_ENOMEM;
        ncap *= 2;
    }
    if (elem && ncap > SIZE_MAX / elem) return AG_DATA_ENOMEM;
    void *q = realloc(*p, ncap * elem);
    if (!q) return AG_DATA_ENOMEM;
    *p = q;
    *cap = ncap;
    return 0;
}

/* Offset of the first byte of s[0..n) that breaks UTF-8 (no overlong forms,
 * surrogates or code points above U+10FFFF), or -1. */
long ag_utf8_error_at(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], cp;
        size_t len;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
        else return (long)i;
        if (len > n - i) return (long)i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return (long)i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return (long)i;
        i += len;
    }
    return -1;
}

/* ---- lines ----------------------------------------------------------------- */

int ag__data_lines_open(ag__data_line_reader *lr, const char *path, size_t max_line_bytes, char *err,
                  size_t errlen) {
    memset(lr, 0, sizeof *lr);
    lr->path = path;
    lr->max = max_line_bytes ? max_line_bytes : ((size_t)64 << 20);
    lr->f = fopen(path, "rb");
    if (!lr->f)
        return ag__data_fail(err, errlen, AG_DATA_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    lr->chunk = malloc(AG_CHUNK_BYTES);
    if (!lr->chunk) {
        ag__data_lines_close(lr);
        return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "%s: out of memory", path);
    }
    return 0;
}

int ag__data_lines_open_mem(ag__data_line_reader *lr, const char *name, const void *bytes, size_t n,
                           size_t max_line_bytes, char *err, size_t errlen) {
    memset(lr, 0, sizeof *lr);
    lr->path = name;
    lr->max = max_line_bytes ? max_line_bytes : ((size_t)64 << 20);
    lr->mem = n ? bytes : "";
    lr->mem_len = n;
    lr->chunk = malloc(AG_CHUNK_BYTES);
    if (!lr->chunk) return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "%s: out of memory", name);
    return 0;
}

size_t ag__data_lines_read(ag__data_line_reader *lr, void *dst, size_t n) {
    if (!lr->mem) return fread(dst, 1, n, lr->f);
    if (n > lr->mem_len - lr->mem_pos) n = lr->mem_len - lr->mem_pos;
    memcpy(dst, lr->mem + lr->mem_pos, n);
    lr->mem_pos += n;
    return n;
}

/* The next chunk of the input into lr->chunk: its length, 0 at the end. */
static size_t read_chunk(ag__data_line_reader *lr) { return ag__data_lines_read(lr, lr->chunk, AG_CHUNK_BYTES); }

void ag__data_lines_close(ag__data_line_reader *lr) {
    if (lr->f) fclose(lr->f);
    free(lr->chunk);
    free(lr->buf);
    lr->f = NULL;
    lr->chunk = lr->buf = NULL;
}

int ag__data_lines_next(ag__data_line_reader *lr, char *err, size_t errlen) {
    int got = 0; /* saw a byte or a newline: a line exists */
    lr->len = 0;
    for (;;) {
        if (lr->chunk_pos == lr->chunk_len) {
            if (lr->eof) break;
            lr->chunk_len = read_chunk(lr);
            lr->chunk_pos = 0;
            if (lr->chunk_len == 0) {
                if (lr->f && ferror(lr->f))
                    return ag__data_fail(err, errlen, AG_DATA_EIO, "%s:%lld: read error: %s",
                                        lr->path, (long long)lr->lineno + 1, strerror(errno));
                lr->eof = 1;
                break;
            }
        }
        char *start = lr->chunk + lr->chunk_pos;
        size_t avail = lr->chunk_len - lr->chunk_pos;
        char *nl = memchr(start, '\n', avail);
        size_t take = nl ? (size_t)(nl - start) : avail;
        if (take > lr->max - lr->len)
            return ag__data_fail(err, errlen, AG_DATA_ELIMIT,
                                "%s:%lld: line longer than %zu bytes", lr->path,
                                (long long)lr->lineno + 1, lr->max);
        if (ag__data_grow((void **)&lr->buf, &lr->cap, lr->len + take + 1, 1))
            return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "%s:%lld: out of memory",
                                lr->path, (long long)lr->lineno + 1);
        memcpy(lr->buf + lr->len, start, take);
        lr->len += take;
        lr->chunk_pos += take;
        got = 1;
        if (nl) {
            lr->chunk_pos++;
            break;
        }
    }
    if (!got) return 0;
    lr->lineno++;
    if (lr->len && lr->buf[lr->len - 1] == '\r') lr->len--; /* CRLF (SICK test) */
    lr->buf[lr->len] = 0;
    /* Any other CR means line endings we do not read: with old Mac (CR-only)
     * endings the whole file would pass for one giant line. */
    const char *cr = memchr(lr->buf, '\r', lr->len);
    if (cr)
        return ag__data_fail(err, errlen, AG_DATA_EFORMAT,
                            "%s:%lld: carriage return inside a line, at column %lld (old Mac "
                            "line endings? convert with dos2unix -c mac)",
                            lr->path, (long long)lr->lineno, (long long)(cr - lr->buf) + 1);
    if (lr->lineno == 1 && lr->len >= 3 && memcmp(lr->buf, "\xEF\xBB\xBF", 3) == 0) {
        memmove(lr->buf, lr->buf + 3, lr->len - 2); /* UTF-8 BOM, with the NUL */
        lr->len -= 3;
    }
    return 1;
}

long ag_data_find_junk(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && !(c >= '\t' && c <= '\r')) || c == 0x7f) return (long)i;
    }
    return -1;
}
