/* trees.c - the Stanford Sentiment Treebank's PTB-bracketed trees ->
 * ag_dataset, one example per labelled phrase (or per sentence).
 *
 * A line holds one tree: "(LABEL CHILD ...)" or "(LABEL word)", LABEL a
 * digit 0-4 on every node, from single words to the whole sentence.  Words
 * hold no spaces and no brackets (SST writes them -LRB-, -RRB-; "\/" and
 * "\*" are kept as the stsa files keep them), so a leaf ends at the first
 * ')'.  The parser walks the line once with an explicit stack: a hostile
 * line nests as deep as it likes without touching the C stack.
 *
 * A phrase's dependency parse is its sentence's (ag_tree_opts.parses, found
 * by the sentence's text), cut to the phrase: a word whose head lies outside
 * the phrase becomes a root of it. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct {
    int32_t label;  /* 0-4 as written */
    int32_t start;  /* first leaf of the node */
    int32_t len;    /* leaves under it */
} tree_node;

typedef struct {
    ag_dataset *ds;
    const ag_tree_opts *o;
    const char *path;
    int64_t line;
    tree_node *nodes, *open; /* closed nodes (root last), the stack of open ones */
    size_t cap_nodes, cap_open;
    ag_span *leaves;         /* each leaf's bytes in the line */
    size_t cap_leaves;
    int32_t *sent_heads;     /* heads of the whole sentence (parses), or NULL */
    size_t cap_heads;
    char *text;              /* the sentence's words joined by spaces (parse lookup) */
    size_t cap_text;
    ag__strtab parse_text;    /* text of each parse sentence -> its id */
    int64_t *parse_of;       /* strtab id -> index of the first parse with that text */
    char *err;
    size_t errlen;
} tree_ctx;

static int tree_bad(tree_ctx *c, size_t col, const char *why) {
    return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT, "%s:%lld: column %zu: %s", c->path,
                        (long long)c->line, col + 1, why);
}

static int is_space(char ch) { return ch == ' ' || ch == '\t'; }

/* Reads "(" DIGIT at s[*i]: the node's label. */
static int open_node(tree_ctx *c, const char *s, size_t n, size_t *i, int32_t *label) {
    if (*i >= n || s[*i] != '(') return tree_bad(c, *i, "expected '(' opening a node");
    (*i)++;
    if (*i >= n || s[*i] < '0' || s[*i] > '4') return tree_bad(c, *i, "expected a label 0-4 after '('");
    *label = s[(*i)++] - '0';
    if (*i >= n || !is_space(s[*i])) return tree_bad(c, *i, "expected a space after the label");
    while (*i < n && is_space(s[*i])) (*i)++;
    return 0;
}

static int push_closed(tree_ctx *c, size_t *n_closed, tree_node node) {
    if (ag__data_grow((void **)&c->nodes, &c->cap_nodes, *n_closed + 1, sizeof *c->nodes)) return AG_DATA_ENOMEM;
    c->nodes[(*n_closed)++] = node;
    return 0;
}

/* Parses one tree line into c->nodes (post-order: the root last) and
 * c->leaves; *n_nodes and *n_leaves get the counts. */
static int parse_tree(tree_ctx *c, const char *s, size_t n, size_t *n_nodes, int32_t *n_leaves) {
    size_t i = 0, depth = 0, closed = 0;
    int32_t leaves = 0;
    while (i < n && is_space(s[i])) i++;
    do {
        int32_t label = 0;
        int rc = open_node(c, s, n, &i, &label);
        if (rc) return rc;
        if (i < n && s[i] == '(') { /* an inner node: its children follow */
            if (ag__data_grow((void **)&c->open, &c->cap_open, depth + 1, sizeof *c->open)) return AG_DATA_ENOMEM;
            c->open[depth++] = (tree_node){.label = label, .start = leaves};
            continue;
        }
        size_t w = i; /* a leaf: the word runs to the first ')' */
        while (i < n && s[i] != ')' && !is_space(s[i]) && s[i] != '(') i++;
        if (i == w) return tree_bad(c, i, "empty word");
        if (i >= n || s[i] != ')') return tree_bad(c, i, "a word ends at ')' (one word a leaf, no brackets in it)");
        if (leaves == INT32_MAX) return tree_bad(c, i, "too many words");
        if (ag__data_grow((void **)&c->leaves, &c->cap_leaves, (size_t)leaves + 1, sizeof *c->leaves))
            return AG_DATA_ENOMEM;
        c->leaves[leaves] = (ag_span){.start = w, .len = i - w};
        if ((rc = push_closed(c, &closed, (tree_node){.label = label, .start = leaves, .len = 1})))
            return rc;
        leaves++;
        i++;
        /* close every inner node whose children end here; then a sibling follows */
        for (;;) {
            while (i < n && is_space(s[i])) i++;
            if (depth == 0 || i >= n || s[i] != ')') break;
            tree_node node = c->open[--depth];
            node.len = leaves - node.start;
            if ((rc = push_closed(c, &closed, node))) return rc;
            i++;
        }
        if (depth > 0 && (i >= n || s[i] != '('))
            return tree_bad(c, i, i >= n ? "the line ends inside the tree (a ')' missing)" : "expected '(' or ')'");
    } while (depth > 0);
    while (i < n && is_space(s[i])) i++;
    if (i < n) return tree_bad(c, i, "text after the tree's closing ')'");
    *n_nodes = closed;
    *n_leaves = leaves;
    return 0;
}

/* SST-2 folds 0-1 into 0 and 3-4 into 1 and drops the neutral 2: -1. */
static int32_t class_of(const tree_ctx *c, int32_t label) {
    if (!c->o->binary) return label;
    return label == 2 ? -1 : label > 2;
}

typedef struct {
    const char *line;
    const ag_span *leaves;
} leaf_words;

static const char *leaf_word(void *ctx, int32_t t, size_t *len) {
    const leaf_words *l = ctx;
    *len = l->leaves[t].len;
    return l->line + l->leaves[t].start;
}

/* The sentence's dependency heads (c->sent_heads) from the parse whose
 * words are the tree's leaves (lower-cased; a no-break space inside a word
 * read as the space the parser split it at); an error when there is none. */
static int find_parse(tree_ctx *c, char *line, int32_t n_leaves) {
    const ag_dataset *p = c->o->parses;
    size_t len = 0;
    for (int32_t t = 0; t < n_leaves; t++) len += c->leaves[t].len + 1;
    if (ag__data_grow((void **)&c->text, &c->cap_text, len + 1, 1)) return AG_DATA_ENOMEM;
    char *w = c->text;
    for (int32_t t = 0; t < n_leaves; t++) {
        const char *word = line + c->leaves[t].start;
        for (size_t k = 0; k < c->leaves[t].len; k++) {
            if (k + 1 < c->leaves[t].len && (unsigned char)word[k] == 0xc2 && (unsigned char)word[k + 1] == 0xa0) {
                *w++ = ' ';
                k++;
                continue;
            }
            *w++ = word[k] >= 'A' && word[k] <= 'Z' ? word[k] + ('a' - 'A') : word[k];
        }
        *w++ = ' ';
    }
    len = (size_t)(w - c->text) - 1;
    const char *where = ag_dataset_path(p) ? ag_dataset_path(p) : "the parses";
    int32_t id = ag__strtab_find(&c->parse_text, c->text, len);
    if (id < 0)
        return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                            "%s:%lld: no parse of this sentence in %s (its words, lower-cased, match no sentence there)",
                            c->path, (long long)c->line, where);
    int64_t k = c->parse_of[id];
    size_t need = (size_t)(n_leaves > p->ex[k].len ? n_leaves : p->ex[k].len);
    if (ag__data_grow((void **)&c->sent_heads, &c->cap_heads, 3 * need, sizeof *c->sent_heads)) return AG_DATA_ENOMEM;
    leaf_words lw = {line, c->leaves};
    int32_t tok, bad = ag__data_parse_heads(leaf_word, &lw, n_leaves, p, k, c->sent_heads, c->sent_heads + need, &tok);
    if (bad >= 0) /* the same text, so only a word split at a no-break space that the parse did not split */
        return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT, "%s:%lld: word %d does not match its parse at %s:%lld",
                            c->path, (long long)c->line, (int)bad + 1, where, (long long)p->ex[k].line);
    return 0;
}

/* One example: the leaves of `node`, their heads cut to the phrase. */
static int add_phrase(tree_ctx *c, char *line, tree_node node, int32_t cls) {
    ag__ds_begin(c->ds);
    for (int32_t t = 0; t < node.len; t++) {
        ag_span sp = c->leaves[node.start + t];
        char *word = line + sp.start;
        if (c->o->lowercase)
            for (size_t k = 0; k < sp.len; k++)
                if (word[k] >= 'A' && word[k] <= 'Z') word[k] += 'a' - 'A';
        int32_t head = AG_HEAD_ROOT;
        if (c->sent_heads) {
            int32_t h = c->sent_heads[node.start + t];
            head = h >= node.start && h < node.start + node.len ? h - node.start : AG_HEAD_ROOT;
        }
        if (ag__ds_add(c->ds, word, sp.len, head)) return AG_DATA_ENOMEM;
    }
    return ag__ds_end(c->ds, cls, 0.0f, c->line, 0) ? AG_DATA_ENOMEM : 0;
}

static int tree_line(tree_ctx *c, char *line, size_t n) {
    size_t n_nodes = 0;
    int32_t n_leaves = 0;
    int rc = parse_tree(c, line, n, &n_nodes, &n_leaves);
    if (rc) return rc;
    /* before its phrases: a chain of N words makes phrases of N^2 / 2 words in all */
    if ((rc = ag__data_too_many_words(c->path, c->line, n_leaves, c->o->max_words, c->err, c->errlen))) return rc;
    if (c->o->parses && (rc = find_parse(c, line, n_leaves))) return rc;
    /* the sentence first, then its phrases in the order they close */
    tree_node root = c->nodes[n_nodes - 1];
    int32_t cls = class_of(c, root.label);
    if (cls >= 0 && (rc = add_phrase(c, line, root, cls))) return rc;
    for (size_t k = 0; c->o->phrases && k + 1 < n_nodes; k++)
        if ((cls = class_of(c, c->nodes[k].label)) >= 0 && (rc = add_phrase(c, line, c->nodes[k], cls))) return rc;
    return 0;
}

/* The text of every parse sentence, lower-cased, for find_parse. */
static int index_parses(tree_ctx *c) {
    const ag_dataset *p = c->o->parses;
    if (p->format != AG_FORMAT_CONLLU)
        return ag__data_fail(c->err, c->errlen, AG_DATA_EINVAL, "trees: the parses must be a CoNLL-U dataset, not %s",
                            ag_format_name(p->format));
    c->parse_of = malloc(((size_t)p->n + 1) * sizeof *c->parse_of);
    if (!c->parse_of) return AG_DATA_ENOMEM;
    for (int64_t i = 0; i < p->n; i++) {
        size_t len = 0;
        for (int32_t t = 0; t < p->ex[i].len; t++) len += strlen(ag_dataset_word(p, i, 0, t)) + 1;
        if (ag__data_grow((void **)&c->text, &c->cap_text, len + 1, 1)) return AG_DATA_ENOMEM;
        char *w = c->text;
        for (int32_t t = 0; t < p->ex[i].len; t++) {
            for (const char *s = ag_dataset_word(p, i, 0, t); *s; s++) *w++ = *s >= 'A' && *s <= 'Z' ? *s + ('a' - 'A') : *s;
            *w++ = ' ';
        }
        int32_t id, before = c->parse_text.n;
        if (ag__strtab_intern(&c->parse_text, c->text, len ? len - 1 : 0, &id)) return AG_DATA_ENOMEM;
        if (c->parse_text.n > before) c->parse_of[id] = i; /* a repeated sentence: its first parse */
    }
    return 0;
}

static int trees_load(const char *path, const void *mem, size_t mem_len, const ag_tree_opts *opts, ag_dataset *ds,
                      char *err, size_t errlen) {
    ag_tree_opts o = opts ? *opts : (ag_tree_opts){0};
    memset(ds, 0, sizeof *ds);
    ag__data_line_reader lr;
    int rc = mem ? ag__data_lines_open_mem(&lr, path, mem, mem_len, o.max_line_bytes, err, errlen)
                 : ag__data_lines_open(&lr, path, o.max_line_bytes, err, errlen);
    if (rc) return rc;
    tree_ctx c = {.ds = ds, .o = &o, .path = path, .err = err, .errlen = errlen};
    if (ag__ds_init(ds, AG_FORMAT_LABELED) || !(ds->store->path = strdup(path))) rc = AG_DATA_ENOMEM;
    if (!rc && o.parses) {
        ds->store->with_heads = 1;
        rc = index_parses(&c);
    }
    while (rc == 0 && (rc = ag__data_lines_next(&lr, err, errlen)) == 1) {
        c.line = lr.lineno;
        long junk = ag_data_find_junk(lr.buf, lr.len);
        if (junk < 0) ag__data_note_utf8(&ds->stats, path, lr.lineno, lr.buf, lr.len);
        if (ag_tokenize(lr.buf, lr.len, 0, NULL, 0) == 0) ds->stats.blank++;
        char why[40]; /* the byte, as every other reader names it (data files, parses, stdin) */
        snprintf(why, sizeof why, "binary data (byte 0x%02x)", junk >= 0 ? (unsigned char)lr.buf[junk] : 0);
        rc = ag_tokenize(lr.buf, lr.len, 0, NULL, 0) == 0 ? 0
           : junk >= 0 ? tree_bad(&c, (size_t)junk, why) : tree_line(&c, lr.buf, lr.len);
    }
    if (rc == AG_DATA_ENOMEM)
        rc = ag__data_fail(err, errlen, AG_DATA_ENOMEM, "%s:%lld: out of memory", path, (long long)c.line);
    if (rc == 0 && ds->n == 0) rc = ag__data_fail(err, errlen, AG_DATA_EFORMAT, "%s: no trees", path);
    ds->stats.lines = lr.lineno;
    ag__data_lines_close(&lr);
    free(c.nodes);
    free(c.open);
    free(c.leaves);
    free(c.sent_heads);
    free(c.text);
    free(c.parse_of);
    ag__strtab_free(&c.parse_text);
    if (rc) {
        ag_dataset_free(ds);
        return rc;
    }
    ag__ds_finish(ds);
    if (o.binary && ds->n_classes < 2) ds->n_classes = 2; /* one class present still means SST-2's two */
    return 0;
}

int ag_trees_load(const char *path, const ag_tree_opts *o, ag_dataset *ds, char *err, size_t errlen) {
    return trees_load(path, NULL, 0, o, ds, err, errlen);
}

int ag_trees_load_mem(const char *name, const void *bytes, size_t n, const ag_tree_opts *o, ag_dataset *ds, char *err,
                      size_t errlen) {
    return trees_load(name, bytes ? bytes : "", n, o, ds, err, errlen);
}
