/* internal.h - helpers shared by the data/ sources; not part of the API.
 * Names keep the ag_ prefix because they are visible library symbols. */
#ifndef AG_DATA_INTERNAL_H
#define AG_DATA_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>

#include "attngrad/data.h"

/* Formats the error message (if err) and returns code, so call sites read
 * `return ag__data_fail(err, errlen, AG_DATA_EFORMAT, "%s:%lld: ...", ...)`. */
int ag__data_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Makes *p hold at least `need` elements of `elem` bytes, growing
 * geometrically; 0 or AG_DATA_ENOMEM (also on size overflow). */
int ag__data_grow(void **p, size_t *cap, size_t need, size_t elem);

/* loaders.c: counts text[0..n), line `line` of path, in s->not_utf8 when it
 * is not UTF-8, the first one's place in s->first_not_utf8. */
void ag__data_note_utf8(ag_corpus_stats *s, const char *path, int64_t line, const char *text, size_t n);

/* loaders.c: 0, or AG_DATA_ELIMIT with "path:line: a sentence of N words,
 * more than the limit of M ..." when max_words > 0 and words exceed it. */
int ag__data_too_many_words(const char *path, int64_t line, int64_t words, int64_t max_words, char *err,
                            size_t errlen);

/* loaders.c: where the sentence that starts at token `from` of the k tokens
 * spans[] of s ends (exclusive): after a run of lone ".", "?" or "!" tokens
 * ("! ?" stays whole) that more words follow; k when none does.  LM text
 * with lm_sentences is cut there, and so is a line `predict` scores. */
int64_t ag__sentence_end(const char *s, const ag_span *spans, int64_t from, int64_t k);

/* ---- interned strings: open addressing, FNV-1a, power-of-two slots ---- */

typedef struct {
    char *bytes;       /* NUL-terminated strings back to back */
    size_t nbytes, capbytes;
    size_t *off;       /* off[id] into bytes (offsets survive realloc) */
    uint32_t *len;
    uint64_t *hash;
    int32_t n, cap;
    int32_t *slots;    /* id or -1 */
    size_t nslots;
} ag__strtab;

void ag__strtab_free(ag__strtab *t);
/* Existing id, or a new one; 0 or AG_DATA_ENOMEM / AG_DATA_ELIMIT. */
int ag__strtab_intern(ag__strtab *t, const char *s, size_t len, int32_t *id);
int32_t ag__strtab_find(const ag__strtab *t, const char *s, size_t len);
static inline const char *ag__strtab_str(const ag__strtab *t, int32_t id) {
    return t->bytes + t->off[id];
}

/* ---- dataset store: what ag_dataset.store points at ---------------------- */

struct ag_dataset_store {
    ag__strtab types;     /* every distinct token string of the dataset */
    int32_t *raw;        /* type ids of all sentences back to back */
    int32_t *ids;        /* same layout: vocab ids after encode */
    int32_t *heads;      /* same layout: CoNLL-U heads */
    int64_t nraw;
    size_t capraw, capheads;
    int64_t *off_a, *off_b; /* per example, into raw */
    size_t capex, capoff;
    int64_t open_off;    /* where the example being built starts */
    int64_t open_off_b;  /* -1 until ag__ds_begin_second */
    int32_t eos;         /* type id of <eos>, -1 if absent */
    int with_heads;      /* keep heads for a format other than CoNLL-U (parsed trees) */
    /* CoNLL-U: each sentence's "# sent_id = FILE:LINE[:A|B]" (ag_dataset_attach_parses) */
    ag__strtab sent_files; /* the FILEs */
    int32_t *sent_file;  /* [n]: id in sent_files, -1 without a sent_id of that form */
    int64_t *sent_line;  /* [n]: LINE */
    int8_t *sent_side;   /* [n]: 0, or 'A' / 'B' */
    size_t cap_sent;
    char *path;          /* the file it was loaded from; NULL if generated */
};

/* Building a dataset (used by the loaders and by synth). Example-at-a-time:
 * begin, add tokens, optionally begin_second and add more, then end (keeps
 * it) or abort (drops its tokens). finish fixes the public pointers. */
int ag__ds_init(ag_dataset *ds, ag_format fmt);
void ag__ds_begin(ag_dataset *ds);
int ag__ds_add(ag_dataset *ds, const char *tok, size_t len, int32_t head);
void ag__ds_begin_second(ag_dataset *ds);
int64_t ag__ds_open_len(const ag_dataset *ds);      /* tokens in the open sentence */
int32_t *ag__ds_open_heads(ag_dataset *ds);          /* heads of the open sentence */
int ag__ds_end(ag_dataset *ds, int32_t label, float score, int64_t line, int32_t clip_to);
void ag__ds_abort(ag_dataset *ds);
void ag__ds_finish(ag_dataset *ds);

/* ---- parses ---------------------------------------------------------------- */

/* Word t of a sentence being matched to a parse, *len its bytes. */
typedef const char *(*ag__word_fn)(void *ctx, int32_t t, size_t *len);
/* parses.c: the heads of words 0..n-1 from parse k of p (CoNLL-U).
 * scratch holds 2 * max(n, p's sentence) ints.  -1, or the first word that
 * does not match (n: parse tokens left over), with the parse token in *tok. */
int32_t ag__data_parse_heads(ag__word_fn word, void *ctx, int32_t n, const ag_dataset *p, int64_t k, int32_t *heads,
                            int32_t *scratch, int32_t *tok);

/* ---- lines of a file, any length, with a cap ------------------------------ */

typedef struct {
    FILE *f;
    const char *path;
    char *buf;          /* the current line, NUL-terminated, without \n or \r\n */
    size_t len, cap, max;
    int64_t lineno;
    char *chunk;        /* read buffer */
    size_t chunk_pos, chunk_len;
    int eof;
    const char *mem;    /* lines from memory instead of f (ag__data_lines_open_mem) */
    size_t mem_len, mem_pos;
} ag__data_line_reader;

int ag__data_lines_open(ag__data_line_reader *lr, const char *path, size_t max_line_bytes,
                  char *err, size_t errlen);
/* The same over bytes in memory (borrowed until close); `name` stands for
 * the path in messages. */
int ag__data_lines_open_mem(ag__data_line_reader *lr, const char *name, const void *bytes, size_t n,
                           size_t max_line_bytes, char *err, size_t errlen);
/* 1 = got a line, 0 = end of file, negative = error (message written). */
int ag__data_lines_next(ag__data_line_reader *lr, char *err, size_t errlen);
/* Up to n raw bytes of the input, past what the lines have taken, into dst
 * (file or memory alike): how many; fewer only at the end or on an error. */
size_t ag__data_lines_read(ag__data_line_reader *lr, void *dst, size_t n);
void ag__data_lines_close(ag__data_line_reader *lr);


#endif
