/* checkpoint.h - safetensors files and a training run's checkpoints.  Part
 * of attngrad.h; it stands alone. */
#ifndef ATTNGRAD_CHECKPOINT_H
#define ATTNGRAD_CHECKPOINT_H

#include "optim.h" /* the optimizer and scheduler a checkpoint saves */

#ifdef __cplusplus
extern "C" {
#endif

/* Checkpoints (safetensors)                                                 */
/* ------------------------------------------------------------------------ */

/* The safetensors format: an 8-byte little-endian header length N, N bytes
 * of JSON {"name": {"data_offsets": [begin, end], "dtype": "F32", "shape":
 * [2, 3]}, ..., "__metadata__": {"key": "value"}}, then the tensors' bytes.
 * We write keys sorted at every level, no spaces, the header padded with
 * spaces to a multiple of 8, and the data of 8-byte dtypes before 4-byte
 * ones (every tensor aligned).  We read any file that follows the spec and
 * uses our dtypes (F16 and BF16 too, converted when read), and refuse
 * anything else with a message naming the file and the problem. */
typedef enum { AG_F32, AG_F64, AG_I32, AG_I64, AG_F16, AG_BF16 } ag_dtype;
#define AG_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    ag_dtype dtype;
    int ndim;
    int64_t shape[AG_ST_MAX_DIMS];
    int64_t numel;
    const void *data;   /* little-endian elements; may be unaligned when read */
} ag_st_tensor;

/* Tensors and metadata to write.  Names are copied; data is borrowed until
 * ag_st_write returns (a GPU tensor's values are copied to the host when
 * added, and freed with the writer). */
typedef struct {
    ag_st_tensor *tensors;
    int count, cap;
    char **meta;        /* key, value, key, value, ... */
    int n_meta, meta_cap;
    void **host_copies; /* of GPU tensors' values */
    int n_host_copies;
} ag_st_writer;

void ag_st_add(ag_st_writer *w, const char *name, ag_dtype dtype, int ndim, const int64_t *shape,
               const void *data);
/* A tensor as the build's real type (F32, or F64 in the f64 build). */
void ag_st_add_tensor(ag_st_writer *w, const char *name, const ag_tensor *t);
void ag_st_set_meta(ag_st_writer *w, const char *key, const char *value);
/* Records a CRC-32C of every tensor added so far in the metadata, as
 * "crc32c.<name>" = 8 hex digits, and seals the whole file: ag_st_write
 * stores the CRC-32C of every byte of it (header, metadata and data, with
 * these 8 digits read as "00000000") in AG_ST_FILE_CRC.  Readers verify both
 * (ag_st_read): a damaged tensor is named; any other change (the config,
 * the metrics, a name, a key) is refused as damaged or edited by hand. */
#define AG_ST_CRC_PREFIX "crc32c."
#define AG_ST_FILE_CRC "attngrad.file_crc32c"
#define AG_ST_SEALED "attngrad.sealed" /* "1": the file carries AG_ST_FILE_CRC, so a reader misses it only when damaged */
void ag_st_set_checksums(ag_st_writer *w);
uint32_t ag_crc32c(uint32_t crc, const void *data, size_t n); /* crc 0 to start; chains */
/* Writes atomically: a temporary file in the same folder, fsync, rename,
 * fsync of the folder.  A failed or interrupted write leaves `path` as it
 * was.  AG_ERR_IO with the reason on failure. */
ag_status ag_st_write(const ag_st_writer *w, const char *path);
void ag_st_writer_free(ag_st_writer *w);

/* A file read and validated in full: header length, strict JSON, known
 * dtypes, shapes matching byte sizes, offsets inside the data, contiguous
 * (no gap, no overlap), no duplicate names, and every checksum the
 * metadata holds (ag_st_set_checksums) right. */
typedef struct {
    char *path;
    unsigned char *bytes;
    size_t size;
    ag_st_tensor *tensors;   /* sorted by name */
    int count;
    char **meta;             /* key, value, ... sorted by key */
    int n_meta;
    int unchecked;           /* tensors without a checksum (other writers) */
    bool sealed;             /* the whole file's CRC-32C (AG_ST_FILE_CRC) held; false: a file of another
                                writer, or of attngrad before the seal, whose header loaded unverified */
} ag_st_file;

ag_status ag_st_read(const char *path, ag_st_file *f);
/* The same from bytes in memory (copied); `what` names them in messages. */
ag_status ag_st_parse(const char *what, const void *bytes, size_t size, ag_st_file *f);
const ag_st_tensor *ag_st_get(const ag_st_file *f, const char *name);
const char *ag_st_meta(const ag_st_file *f, const char *key);  /* NULL if absent */
void ag_st_close(ag_st_file *f);
/* Element copies with conversion: F32/F64/F16/BF16 to ag_real, I32/I64 to
 * int64; one float element as a double (exact for every float dtype). */
void ag_st_to_real(const ag_st_tensor *t, ag_real *dst);
double ag_st_real_at(const ag_st_tensor *t, int64_t i);
bool ag_dtype_is_float(ag_dtype dt);                            /* F32, F64, F16, BF16 */
void ag_st_to_i64(const ag_st_tensor *t, int64_t *dst);
const char *ag_dtype_name(ag_dtype dt);                       /* "F32", ... */
const char *ag_st_shape_str(const ag_st_tensor *t, char *buf, size_t n); /* "[2,3]" */

/* What a training loop needs, besides tensors, to resume exactly. */
#define AG_CONFIG_MAX 2048
typedef struct {
    int64_t step, epoch;
    ag_rng rng;                  /* the loop's generator: data order, dropout */
    char config[AG_CONFIG_MAX];  /* free-form, e.g. the model's options */
    /* save only: more metadata, key, value, ..., NULL (e.g. a trainer's
     * metrics log, so that the log can be rebuilt from the checkpoint) */
    const char *const *meta;
} ag_train_state;

/* A checkpoint: every parameter under its name (the build's real type);
 * with an optimizer, its slots as "optim.<kind>.<slot>.<param>", its step
 * as "optim.step" (I64) and its config and current lr in the metadata;
 * with a scheduler, its config and state; with a train state, "step",
 * "epoch", "rng" and "config".  opt, sched and st may be NULL. */
ag_status ag_checkpoint_save(const char *path, const ag_params *ps, const ag_optimizer *opt,
                             const ag_scheduler *sched, const ag_train_state *st);
/* Loads what save wrote into existing parameters (and opt/sched/st when not
 * NULL; the file must then hold them, for the same optimizer and schedule
 * kinds).  The optimizer's config stays the caller's; the file gives its
 * step, its state and its current lr, unless the caller's cfg.lr differs
 * from the saved config's: a new rate, which then stands (schedules go on
 * from it).  A slot the caller's optimizer keeps and the saved one did not
 * (momentum, amsgrad's vmax, centered's grad_avg switched on) starts at
 * zero; the file's state for a slot the caller's optimizer does not keep
 * is not loaded.  F32 and F64 are both accepted.
 * Every parameter must be present with its shape; other tensors in the file
 * are ignored.  Everything is checked before anything is copied: on failure
 * nothing has changed. */
ag_status ag_checkpoint_load(const char *path, ag_params *ps, ag_optimizer *opt, ag_scheduler *sched,
                             ag_train_state *st);

/* ------------------------------------------------------------------------ */

#ifndef AG_INTERNAL

/* optimizers, initializers, checkpoints */
#define ag_st_add(...) AG_AT_STMT(ag_st_add, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif /* ATTNGRAD_CHECKPOINT_H */
