/* attngrad/data.h - attngrad's data pipeline: text files -> vocab -> padded batches.
 *
 * Sources (listed in data/meson.build as `data_sources`):
 *   data/text.c     the error convention, growable arrays, lines of any length
 *   data/vocab.c    tokenizer, string hash table, vocabulary build/save/load
 *   data/loaders.c  file formats -> ag_dataset, dataset encode/save, benchmarks
 *   data/batch.c    seeded RNG, CV folds and splits, sampler, padded batches
 *   data/synth.c    generated tasks (order classification, lookup LM, pairs)
 *   data/vectors.c  pretrained word vectors (GloVe, word2vec text and binary)
 *   data/trees.c    SST's bracketed sentiment trees: sentences and phrases
 *   data/parses.c   dependency parses (CoNLL-U) matched to a data file's sentences
 *
 * Pure C11 with no dependency on the tensor engine: everything here is
 * integers and strings, so the parsers can be tested (and fuzzed) alone.
 *
 * The flow:
 *   ag_dataset_load(train) -> ag_vocab_build(train) -> ag_dataset_encode(each)
 *   ag_sampler_epoch(rng)  -> ag_sampler_batch(i)  -> ag_batch_fill -> model
 * A dataset keeps its tokens as strings (interned once) until encoded, so a
 * vocab can be built from any subset (e.g. the training folds of a CV run)
 * and test data is then mapped through it, unknown words becoming <unk>.
 *
 * Text is bytes, never decoded: tokens are split at ASCII whitespace and
 * compared byte for byte, so UTF-8 and Latin-1 files both load (TREC, MR and
 * SUBJ hold Latin-1 bytes).  Every reader refuses control bytes (binary
 * junk) naming path:line; a line that is not valid UTF-8 is kept and
 * counted (ag_corpus_stats.not_utf8, the first place named), since a file in
 * another encoding silently misses its pretrained vectors.  Vector files
 * alone require UTF-8 words (their format says so; see ag_vectors_read).
 *
 * Errors: every fallible function returns int (0 = ok, negative = one of
 * AG_DATA_E*) and writes a one-line message into the caller's `err` buffer
 * (`errlen` bytes, err may be NULL). Messages about files read
 * "path:line: what is wrong", so a user can open the file at that line.
 * Nothing here aborts or prints; warnings are counted in ag_corpus_stats.
 */
#ifndef AG_DATA_H
#define AG_DATA_H

#include <stddef.h>
#include <stdint.h>

/* ---- conventions (docs/models.md) --------------------------------------- */

enum { AG_PAD_ID = 0, AG_UNK_ID = 1 }; /* fixed ids of <pad> and <unk> */
#define AG_PAD_TOKEN "<pad>"
#define AG_UNK_TOKEN "<unk>"
#define AG_EOS_TOKEN "<eos>"  /* appended to each LM sentence */
enum { AG_HEAD_ROOT = -1, AG_HEAD_PAD = -2 }; /* values in head arrays */
enum { AG_ERR_LEN = 256 }; /* a comfortable size for err buffers */

enum {
    AG_DATA_OK = 0,
    AG_DATA_EIO = -1,      /* cannot open / read / write a file */
    AG_DATA_EFORMAT = -2,  /* malformed input (message names file:line) */
    AG_DATA_ENOMEM = -3,   /* out of memory */
    AG_DATA_EINVAL = -4,   /* bad argument or option from the caller */
    AG_DATA_ELIMIT = -5,   /* input exceeds a size limit (line, ids, ...) */
};

/* ---- tokenizer ----------------------------------------------------------- */

typedef struct { size_t start, len; } ag_span;

/* Splits s[0..n) on ASCII whitespace (space \t \n \v \f \r). Bytes >= 0x80
 * are ordinary token bytes, so Latin-1 and UTF-8 text both pass unchanged.
 * With `lowercase`, A-Z are lowered in place (ASCII only, on purpose: we do
 * not guess the encoding). Writes up to max_spans spans and returns the
 * token count, which may exceed max_spans (call again with more room). */
size_t ag_tokenize(char *s, size_t n, int lowercase, ag_span *spans, size_t max_spans);

/* ---- datasets ------------------------------------------------------------ */

typedef enum {
    AG_FORMAT_LABELED = 1, /* "label sentence" lines (TREC .all, SST, MR...) */
    AG_FORMAT_SICK,        /* TSV pairs with header: score + 3-way label */
    AG_FORMAT_CONLLU,      /* CoNLL-U: FORM tokens + HEAD column */
    AG_FORMAT_LM,          /* one sentence per line, <eos> appended */
} ag_format;

typedef struct {
    const int32_t *tokens;   /* vocab ids, len of them; NULL until encoded */
    int32_t len;             /* tokens used (LM: clipped to max_len + 1) */
    int32_t full_len;        /* tokens in the source (== len except LM) */
    const int32_t *tokens_b; /* pairs: second sentence (NULL otherwise) */
    int32_t len_b;
    const int32_t *heads;    /* a parse: 0-based parent, -1 root; else NULL */
    const int32_t *heads_b;  /* pairs: the second sentence's parse, or NULL */
    int32_t label;           /* class id, -1 when the format has none */
    float score;             /* SICK relatedness (0 otherwise) */
    int64_t line;            /* 1-based source line (first line of it) */
} ag_example;

typedef struct {
    int64_t lines;      /* physical lines read */
    int64_t examples;   /* examples kept */
    int64_t tokens;     /* text tokens (both sentences; no <eos>) */
    int64_t blank;      /* blank lines skipped */
    int64_t skipped;    /* bad lines/sentences skipped (skip_bad_lines) */
    int64_t clipped;    /* LM sentences longer than max_len + 1 */
    int64_t unk;        /* text tokens encoded as <unk> (literal ones too) */
    int64_t oov;        /* text tokens absent from the vocab */
    double oov_rate;    /* oov / tokens, after ag_dataset_encode */
    char first_warning[AG_ERR_LEN]; /* message of the first skipped line */
    int64_t not_utf8;   /* lines (kept, read as bytes) that are not valid UTF-8 */
    char first_not_utf8[AG_ERR_LEN]; /* "path:line: byte 0xff at column 3" of the first */
} ag_corpus_stats;

typedef struct ag_dataset_store ag_dataset_store; /* interned strings, pools */

typedef struct {
    ag_format format;
    ag_example *ex;      /* n examples, in file order */
    int64_t n;
    int32_t n_classes;   /* max label + 1 (SICK: 3; LM: 0) */
    int32_t lm_max_len;  /* LM: the max_len it was loaded with */
    int encoded;         /* tokens point at vocab ids */
    ag_corpus_stats stats;
    ag_dataset_store *store; /* private */
} ag_dataset;

typedef struct ag_vocab ag_vocab;

typedef struct {
    int lowercase;          /* lower-case ASCII letters of every token */
    int skip_bad_lines;     /* skip malformed lines (counted) instead of failing */
    int32_t lm_max_len;     /* LM: x = s[0:max_len], y = s[1:max_len+1]; 35 */
    int lm_sentences;       /* LM: an example per sentence, not per line: a line is
                               cut after each standalone ".", "?" or "!" (a run of
                               them stays together) that more words follow, and
                               every piece gets its <eos>.  For text whose lines
                               are paragraphs (WikiText-2); 0: a line an example */
    size_t max_line_bytes;  /* longer lines are an error (AG_DATA_ELIMIT) */
    int32_t n_classes;      /* > 0: a label outside [0, n_classes) is an error, even
                               with skip_bad_lines (benchmarks); 0: any label */
    int require_labels;     /* CoNLL-U: a sentence without "# label = N" is bad
                               (for classification); else its label is -1 */
    int64_t first_line;     /* number of the input's first line in messages and
                               ag_example.line (0 = 1): text cut from a longer input */
    int64_t max_words;      /* > 0: a sentence of more words (a pair's two together,
                               a CoNLL-U sentence's tokens) is an error (AG_DATA_ELIMIT,
                               "FILE:LINE: a sentence of N words ..."), even with
                               skip_bad_lines, before its words are kept: attention's
                               memory grows in their square.  Not LM text, whose
                               windows (lm_max_len) bound it.  0: no limit */
} ag_load_opts;

ag_load_opts ag_load_opts_default(void); /* no lowercase, strict, 35, 64 MiB */

/* Loads `path` in format `fmt`. With a vocab, also encodes (OOV stats);
 * with vocab == NULL the dataset holds strings only (see ag_vocab_build).
 * On error `ds` is left empty (safe to ag_dataset_free). */
int ag_dataset_load(const char *path, ag_format fmt, const ag_load_opts *opts,
                    const ag_vocab *vocab, ag_dataset *ds, char *err, size_t errlen);
/* The same from bytes in memory (borrowed during the call); `name` stands
 * for the path in messages (fuzzing, data that is not in a file). */
int ag_dataset_load_mem(const char *name, const void *bytes, size_t n, ag_format fmt, const ag_load_opts *opts,
                        const ag_vocab *vocab, ag_dataset *ds, char *err, size_t errlen);
void ag_dataset_free(ag_dataset *ds);
/* First byte of a line that is binary junk (NUL or ASCII control other than
 * whitespace), or -1: what the loaders refuse, for other readers of text
 * (predict's stdin). Latin-1 / UTF-8 bytes >= 0x80 are fine. */
long ag_data_find_junk(const char *s, size_t n);
/* Offset of the first byte of s[0..n) that breaks UTF-8 (no overlong
 * forms, surrogates or code points above U+10FFFF), or -1: the check behind
 * ag_corpus_stats.not_utf8, for other readers of text. */
long ag_utf8_error_at(const char *s, size_t n);
/* The file ds was loaded from (for messages), or NULL if it was generated. */
const char *ag_dataset_path(const ag_dataset *ds);

/* Maps every token through `vocab` (unknown -> <unk>; the literal tokens
 * "<unk>" and "<pad>" -> <unk>) and fills stats.unk/oov/oov_rate.
 * Re-encoding with another vocab is allowed. */
int ag_dataset_encode(ag_dataset *ds, const ag_vocab *vocab, char *err, size_t errlen);

/* The source string of token t of example i (second sentence if `second`). */
const char *ag_dataset_word(const ag_dataset *ds, int64_t i, int second, int32_t t);

/* Longest len (and len_b) over the dataset; LM callers use len - 1. */
void ag_dataset_max_len(const ag_dataset *ds, int32_t *max_len, int32_t *max_len_b);

/* Writes the dataset back in its own format (round trip; used to export the
 * synthetic tasks as files). LM sentences are written without <eos>. */
int ag_dataset_save(const ag_dataset *ds, const char *path, char *err, size_t errlen);

int ag_format_parse(const char *name, ag_format *fmt); /* "labeled","sick","conllu","lm" */
const char *ag_format_name(ag_format fmt);

/* The benchmark files under AG_DATA_DIR (docs/data.md; tools/get-data.sh fetches them).
 * Paths are relative to the data dir; dev == NULL means "split one off
 * train" (ag_split_holdout); cv means no split at all: 10-fold CV. */
typedef struct {
    const char *name;       /* "trec", "sst5", "sst2", "mr", "subj", "cr",
                               "mpqa", "sick", "ptb", "wikitext2" */
    ag_format format;
    const char *train, *dev, *test; /* cv sets: train is the only file */
    int cv;
    int32_t n_classes;      /* 0 for LM */
    int lowercase;          /* TREC and SICK are cased; the rest lower-case */
    int32_t label_only_lines; /* CR 4, MPQA 3 lines hold a label and no text:
                                 load with skip_bad_lines and expect this many */
    const char *label_names;  /* the classes by id, comma-separated ("DESC,ENTY,..."); NULL for LM */
    int lm_sentences;         /* LM text with a paragraph a line (WikiText-2): load with
                                 ag_load_opts.lm_sentences, as its paper splits it */
} ag_benchmark;

const ag_benchmark *ag_benchmark_find(const char *name); /* NULL if unknown */

/* ---- SST's sentiment trees; dependency parses ------------------------------ */

/* The Stanford Sentiment Treebank's PTB-bracketed trees, one a line:
 * "(LABEL CHILD CHILD)" or "(LABEL word)", LABEL 0-4 on every node.  Each
 * tree gives its sentence (the root) and, with `phrases`, every other node
 * as an example of its own (duplicates kept: SST's usual protocol), all of
 * AG_FORMAT_LABELED with `line` the tree's line.  A bad tree is an error
 * naming path:line and the column. */
typedef struct {
    int binary;        /* SST-2: neutral (2) nodes dropped, 0-1 -> 0, 3-4 -> 1 */
    int phrases;       /* every labelled node an example; else the sentences only */
    int lowercase;     /* ASCII lower-case, as the stsa files are */
    size_t max_line_bytes; /* 0: 64 MiB */
    int64_t max_words;     /* > 0: a tree of more words is an error, as ag_load_opts.max_words */
    /* CoNLL-U parses of the same sentences (any order, found by the words,
     * lower-cased), or NULL.  A phrase keeps its sentence's heads inside it;
     * a word whose head is outside becomes a root.  A tree with no parse is
     * an error. */
    const ag_dataset *parses;
} ag_tree_opts;

int ag_trees_load(const char *path, const ag_tree_opts *o, ag_dataset *ds, char *err, size_t errlen);
int ag_trees_load_mem(const char *name, const void *bytes, size_t n, const ag_tree_opts *o, ag_dataset *ds,
                      char *err, size_t errlen);

/* Gives each sentence of ds (labeled or sick; both sides of a pair) the
 * heads of its parse in `parses` (CoNLL-U), found by the parse's
 * "# sent_id = FILE:LINE" (":A" / ":B" for a pair's sides; FILE must be
 * ds's file name) or, when the parses carry no such ids, by order.  The
 * words must agree (ASCII case aside).  Refused, naming both files and
 * lines: a sentence without a parse, different words, a parse of a line ds
 * does not hold, two parses of one sentence.  On error ds is unchanged. */
int ag_dataset_attach_parses(ag_dataset *ds, const ag_dataset *parses, char *err, size_t errlen);

/* ---- vocabulary ---------------------------------------------------------- */

typedef struct {
    int64_t min_count;  /* keep tokens seen at least this often (>= 1) */
    int32_t max_size;   /* 0 = no cap; else at most this many ids in all */
} ag_vocab_opts;

/* Builds from the examples `subset[0..n)` of ds (subset NULL: all of ds),
 * both sentences of pairs, <eos> included. Ids: <pad>=0, <unk>=1, then by
 * descending count, ties by byte order of the strings (deterministic). */
int ag_vocab_build(const ag_dataset *ds, const int64_t *subset, int64_t n,
                   const ag_vocab_opts *opts, ag_vocab **out, char *err, size_t errlen);
/* From an explicit token list; tokens[0..1] must be <pad>, <unk>. */
int ag_vocab_from_list(const char *const *tokens, int32_t n, ag_vocab **out,
                       char *err, size_t errlen);
void ag_vocab_free(ag_vocab *v);

int32_t ag_vocab_size(const ag_vocab *v);
/* FNV-1a over the tokens in id order, each ended by '\n': the same words
 * in another order (another run's vocab.txt of the same size) differ. */
uint64_t ag_vocab_fingerprint(const ag_vocab *v);
const char *ag_vocab_token(const ag_vocab *v, int32_t id); /* NULL if out of range */
int32_t ag_vocab_find(const ag_vocab *v, const char *tok, size_t len); /* -1 if absent */
int32_t ag_vocab_id(const ag_vocab *v, const char *tok, size_t len); /* absent -> <unk> */

/* Text file, one token per line, line i = id i-1. Load checks: lines 1-2
 * are <pad>/<unk>, no empty/duplicate tokens, no whitespace or control bytes. */
int ag_vocab_save(const ag_vocab *v, const char *path, char *err, size_t errlen);
int ag_vocab_load(const char *path, ag_vocab **out, char *err, size_t errlen);
/* The same from bytes in memory, named `name` in messages. */
int ag_vocab_load_mem(const char *name, const void *bytes, size_t n, ag_vocab **out, char *err, size_t errlen);

/* ---- pretrained word vectors ---------------------------------------------- */

/* Word vectors for a vocabulary, read from Stanford GloVe text ("word v1 ..
 * vd" lines), word2vec/fastText text (a "count dim" line first) or word2vec
 * binary (that header, then "word " and dim little-endian float32 per
 * record, '\n' after it optional): detected from the first lines (a first
 * line of two integers is the header; after it, the file is binary when the
 * bytes after the first word are not all text).  The file
 * is streamed; only the rows of the vocabulary's words are kept, so memory
 * is vocab x dim floats whatever the file's size.  A token matches a record
 * of the same word or, unless exact_only, of its ASCII-lowercased form (an
 * exact record wins over the lowercase one wherever each is).  <pad> and
 * <unk> are never looked up.
 *
 * Errors name path:line (binary: the record and its byte offset after the
 * header) and leave
 * *out empty: a record with too few or too many values, a value that is not
 * a decimal number (checked on every record; the records used must also be
 * finite floats), a dimension of 0 or above max_dim, a word that is not
 * UTF-8, a header count the records do not match, a binary file cut short.
 * Not errors: a record whose word holds spaces (no token can: skipped and
 * counted in `spaced`, as glove.840B's "at name@domain.com"), and a word the
 * vocabulary uses seen twice: the first record is kept, counted in
 * `duplicates`, the first case described in first_warning.  Duplicates of
 * words the vocabulary does not use are not looked for (that would need
 * every word of the file in memory). */
typedef enum { AG_VEC_GLOVE = 1, AG_VEC_W2V_TEXT, AG_VEC_W2V_BINARY } ag_vec_format;
enum { AG_VEC_NONE = 0, AG_VEC_EXACT = 1, AG_VEC_LOWER = 2 }; /* ag_vectors.found[] */
enum { AG_VEC_MAX_DIM = 65536 }; /* as --dim's range */

typedef struct {
    int exact_only;    /* no lowercase fallback */
    int32_t max_dim;   /* larger dimensions are refused; 0 = AG_VEC_MAX_DIM */
} ag_vec_opts;

typedef struct {
    ag_vec_format format;
    int32_t dim, vocab;      /* rows is [vocab, dim] */
    float *rows;             /* the vector of each vocab id found; 0 elsewhere */
    uint8_t *found;          /* [vocab]: AG_VEC_NONE, AG_VEC_EXACT or AG_VEC_LOWER */
    int32_t n_exact, n_lower;/* vocabulary words found each way */
    int64_t records;         /* vectors in the file (spaced ones not counted) */
    int64_t spaced;          /* records skipped: their word holds spaces */
    int64_t duplicates;      /* records of a vocabulary word seen before */
    char first_warning[AG_ERR_LEN];
} ag_vectors;

int ag_vectors_read(const char *path, const ag_vocab *vocab, const ag_vec_opts *opts, ag_vectors *out,
                    char *err, size_t errlen);
/* The same over n bytes in memory; `name` stands for the path in messages. */
int ag_vectors_read_mem(const char *name, const void *bytes, size_t n, const ag_vocab *vocab,
                        const ag_vec_opts *opts, ag_vectors *out, char *err, size_t errlen);
void ag_vectors_free(ag_vectors *v);
const char *ag_vec_format_name(ag_vec_format f); /* "GloVe text", "word2vec text", "word2vec binary" */
/* Tokens of examples subset[0..n) of the encoded ds (subset NULL: all; both
 * sentences of pairs) whose word has a vector; *tokens gets the total. */
int64_t ag_vectors_coverage(const ag_vectors *v, const ag_dataset *ds, const int64_t *subset, int64_t n,
                            int64_t *tokens);

/* ---- deterministic randomness ------------------------------------------- */

/* xoshiro256** seeded by splitmix64. The whole state is s[4]: save those
 * four integers in a checkpoint to resume the exact same epoch order. */
typedef struct { uint64_t s[4]; } ag_data_rng;

void ag_data_rng_seed(ag_data_rng *r, uint64_t seed);
uint64_t ag_data_rng_next(ag_data_rng *r);
uint64_t ag_data_rng_below(ag_data_rng *r, uint64_t n); /* uniform [0,n), n>0 */
double ag_data_rng_uniform(ag_data_rng *r);              /* uniform [0,1) */
void ag_data_rng_shuffle(ag_data_rng *r, int64_t *a, int64_t n);

/* ---- splits --------------------------------------------------------------- */

/* fold[i] in [0,k) for i < n; fold sizes differ by at most 1. */
int ag_cv_assign(int64_t n, int k, uint64_t seed, int32_t *fold);
/* Index lists (ascending) for one CV round: test = fold test_fold, dev =
 * fold dev_fold (-1: no dev), train = the rest. Buffers hold n entries;
 * dev may be NULL when dev_fold is -1. */
int ag_cv_split(const int32_t *fold, int64_t n, int k, int test_fold, int dev_fold,
                int64_t *train, int64_t *n_train, int64_t *dev, int64_t *n_dev,
                int64_t *test, int64_t *n_test);
/* Random dev split of idx[0..n) (idx NULL: 0..n-1): round(n*dev_frac) go to
 * dev, the rest to train, both ascending. For sets with no dev file. */
int ag_split_holdout(const int64_t *idx, int64_t n, double dev_frac, uint64_t seed,
                     int64_t *train, int64_t *n_train, int64_t *dev, int64_t *n_dev);

/* ---- sampler: which examples form batch i --------------------------------- */

typedef struct {
    int32_t batch_size;
    int shuffle;           /* shuffle examples, then the batch order */
    int32_t bucket_chunks; /* k > 0: sort by length within chunks of k*batch */
    int drop_last;         /* drop the final partial batch */
} ag_sampler_opts;

typedef struct {
    ag_sampler_opts opts;
    const ag_dataset *ds;
    int64_t n;            /* examples in the subset */
    int64_t n_batches;
    int64_t *subset;      /* private copies, allocated once in init */
    int64_t *order;
    int64_t *batch_perm;
    uint64_t *sort_keys;
} ag_sampler;

int ag_sampler_init(ag_sampler *s, const ag_dataset *ds, const int64_t *subset, int64_t n,
                    const ag_sampler_opts *opts, char *err, size_t errlen);
void ag_sampler_free(ag_sampler *s);
/* New epoch order; allocation-free; depends only on the rng state passed
 * (so restoring the rng restores the epoch). rng may be NULL if !shuffle. */
void ag_sampler_epoch(ag_sampler *s, ag_data_rng *rng);
/* Dataset indices of batch i (0 <= i < n_batches); *rows gets its size. */
const int64_t *ag_sampler_batch(const ag_sampler *s, int64_t i, int32_t *rows);

/* ---- padded batches ------------------------------------------------------- */

typedef struct {
    int32_t fixed_len; /* > 0: every row exactly this wide, longer cut (dual-axial L) */
    int32_t n_bigram;  /* > 1: fill bigram ids with this many buckets (docs/models.md, dual-axial) */
    int heads;         /* fill heads: the parse, or the chain i -> i+1 without one */
    int32_t max_width; /* capacity; 0 = longest example of the dataset */
    int32_t max_len;   /* > 0: longer rows cut to their first max_len tokens (a
                          parse's heads past the cut become roots) */
} ag_batch_opts;

/* All arrays are row-major [rows, width] or [rows]; row stride == width.
 * Padding: tokens/targets/bigrams 0, heads AG_HEAD_PAD. A buffer that the
 * dataset/options do not need is NULL. */
typedef struct {
    ag_batch_opts opts;
    ag_format format;
    int32_t max_rows, max_width;  /* capacity fixed at alloc */
    int32_t rows;                 /* examples in this batch (last may be short) */
    int32_t width, width_b;       /* N of this batch: longest row or fixed_len */
    int32_t *tokens, *lengths;    /* LM: inputs s[0:n], n = min(len-1, width) */
    int32_t *targets;             /* LM only: s[1:n+1] */
    int32_t *labels;              /* [rows]; -1 where the data has none */
    float *scores;                /* [rows]; pairs only */
    int32_t *tokens_b, *lengths_b;/* pairs only */
    int32_t *heads, *heads_b;     /* opts.heads */
    int32_t *bigrams, *bigrams_b; /* opts.n_bigram > 1 */
    int64_t *index;               /* [rows] dataset index of each row */
} ag_batch;

int ag_batch_alloc(ag_batch *b, const ag_dataset *ds, int32_t max_rows,
                   const ag_batch_opts *opts, char *err, size_t errlen);
void ag_batch_free(ag_batch *b);
/* Fills rows from ds->ex[idx[r]]; allocates nothing. ds must be encoded and
 * of the format the batch was allocated for. */
int ag_batch_fill(ag_batch *b, const ag_dataset *ds, const int64_t *idx, int32_t rows,
                  char *err, size_t errlen);

/* docs/models.md, dual-axial: 1 + (w*1000003 + w_next) mod (n_bi - 1), in 64-bit. */
int32_t ag_bigram_id(int32_t w, int32_t w_next, int32_t n_bi);

/* ---- synthetic tasks (no files; deterministic from the seeds) ------------- */

typedef enum {
    /* Classification where order and distance matter. Each sentence has
     * length in [min_len,max_len] and holds the markers "A" and "B" once,
     * at distance d >= 1, the other positions being distractors
     * "w0".."w{n_words-1}". Label = (B before A) + 2*(d > near):
     *   0 A..B near, 1 B..A near, 2 A..B far, 3 B..A far.
     * Length and the bag of words are independent of the label, so a
     * bag-of-words model sits at chance (25%) while attention can solve it. */
    AG_SYNTH_ORDER = 1,
    /* LM: lookup-table composition (Liska et al.; Dubois et al. as in the
     * positional attentive LM paper §4.1). n_tables random permutations
     * "t0".. of the 8 bit strings "000".."111". A sentence is
     *   x t_a1 .. t_ak : r1 .. rk      with r_i = t_ai(r_{i-1}), r_0 = x,
     * so the answer r_i needs the table k+1 positions back. split TRAIN
     * holds out one second table per first table (the composition
     * t_a1 t_a2 with a2 = sigma(a1), sigma fixed by task_seed); split TEST
     * uses only held-out compositions (k >= 2), to test generalisation. */
    AG_SYNTH_LOOKUP,
    /* Pairs (SICK-like): a = random words; b = a span of a (ENTAILMENT=1),
     * the same span reversed (CONTRADICTION=2: same words, order differs),
     * or random words (NEUTRAL=0). score = 1 + 4*(share of b's tokens in a). */
    AG_SYNTH_PAIR,
} ag_synth_task;

enum { AG_SYNTH_SPLIT_ALL = 0, AG_SYNTH_SPLIT_TRAIN, AG_SYNTH_SPLIT_TEST };

typedef struct {
    uint64_t seed;       /* sampling of the examples */
    uint64_t task_seed;  /* LOOKUP: the tables and held-out compositions */
    int64_t n;           /* examples */
    int32_t min_len, max_len; /* ORDER, PAIR sentence lengths */
    int32_t n_words;     /* distractor vocabulary size */
    int32_t near;        /* ORDER: distance threshold */
    int32_t n_tables, min_steps, max_steps; /* LOOKUP */
    int split;           /* LOOKUP: AG_SYNTH_SPLIT_* */
    int32_t lm_max_len;  /* LOOKUP: as ag_load_opts.lm_max_len */
} ag_synth_opts;

ag_synth_opts ag_synth_opts_default(ag_synth_task task);
/* Produces a string dataset (encode it like a loaded one): ORDER gives
 * AG_FORMAT_LABELED, LOOKUP AG_FORMAT_LM, PAIR AG_FORMAT_SICK. */
int ag_synth(ag_synth_task task, const ag_synth_opts *opts, ag_dataset *ds,
             char *err, size_t errlen);

#endif
