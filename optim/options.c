/* options.c - parsing and printing "name:key=value,..." specs.
 *
 * Strict on purpose: a typo in an option string silently falling back to a
 * default would make an experiment measure something else than intended,
 * so every key must be known, given once, and its value read in full. */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

ag_status ag__spec_split(const char *what, const char *spec, char *name, size_t n, const char **rest) {
    if (!spec || !*spec) return ag__fail(AG_ERR_ARG, "empty %s spec", what);
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len == 0) return ag__fail(AG_ERR_ARG, "%s spec '%s' has no name before ':'", what, spec);
    if (len >= n) return ag__fail(AG_ERR_ARG, "%s name in '%s' is too long", what, spec);
    memcpy(name, spec, len);
    name[len] = 0;
    *rest = colon ? colon + 1 : "";
    return AG_OK;
}

ag_status ag__spec_kind(const char *what, const char *spec, const char *const *names, int n_names, char *name,
                        size_t n, const char **rest, int *kind) {
    ag_status st = ag__spec_split(what, spec, name, n, rest);
    if (st) return st;
    char known[256] = "";
    for (int k = 0; k < n_names; k++) {
        if (!strcmp(name, names[k])) {
            *kind = k;
            return AG_OK;
        }
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "", names[k]);
    }
    return ag__fail(AG_ERR_ARG, "unknown %s '%s' (known: %s)", what, name, known);
}

static const opt_field *find_field(const opt_field *f, int n, const char *key, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(f[i].key) == len && strncmp(f[i].key, key, len) == 0) return &f[i];
    return NULL;
}

static void known_keys(const opt_field *f, int n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, i ? ", %s" : "%s", f[i].key);
}

/* What a number may start with.  strtod and strtol also read leading
 * blanks, and strtod hex ("0x1p-3") and "inf": "lr= 1" or "lr=0x10" would
 * run an experiment with a value nobody wrote in decimal. */
static bool plain_number(const char *v) {
    return (isdigit((unsigned char)v[0]) || v[0] == '-' || v[0] == '+' || v[0] == '.') && !strpbrk(v, "xX");
}

/* Reads one value of the field's type from exactly value[0..len). */
static ag_status set_value(const char *what, const char *name, const opt_field *f, const char *value,
                           size_t len) {
    char v[64];
    if (len == 0 || len >= sizeof v)
        return ag__fail(AG_ERR_ARG, "%s '%s': key '%s': %s value", what, name, f->key, len ? "overlong" : "empty");
    memcpy(v, value, len);
    v[len] = 0;
    char *end;
    errno = 0;
    switch (f->type) {
    case OPT_REAL: {
        double x = strtod(v, &end);
        if (plain_number(v) && !*end && errno == ERANGE && isfinite(x)) /* 1e-400: a number, but no double's */
            return ag__fail(AG_ERR_ARG, "%s '%s': key '%s': '%s' is too close to 0 for a double", what, name, f->key, v);
        if (!plain_number(v) || *end || end == v || errno == ERANGE || !isfinite(x))
            return ag__fail(AG_ERR_ARG, "%s '%s': key '%s': '%s' is not a finite number", what, name, f->key, v);
        *(double *)f->dst = x;
        return AG_OK;
    }
    case OPT_INT: {
        long x = strtol(v, &end, 10);
        if (!plain_number(v) || *end || end == v || errno == ERANGE || x < -2147483647L || x > 2147483647L)
            return ag__fail(AG_ERR_ARG, "%s '%s': key '%s': '%s' is not an integer", what, name, f->key, v);
        *(int *)f->dst = (int)x;
        return AG_OK;
    }
    case OPT_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true")) *(bool *)f->dst = true;
        else if (!strcmp(v, "0") || !strcmp(v, "false")) *(bool *)f->dst = false;
        else return ag__fail(AG_ERR_ARG, "%s '%s': key '%s': '%s' is not a boolean (0, 1, true, false)", what, name, f->key, v);
        return AG_OK;
    case OPT_CHOICE:
        if (!strcmp(v, f->choices[0])) *(bool *)f->dst = false;
        else if (!strcmp(v, f->choices[1])) *(bool *)f->dst = true;
        else return ag__fail(AG_ERR_ARG, "%s '%s': key '%s': '%s' is not '%s' or '%s'", what, name, f->key, v, f->choices[0], f->choices[1]);
        return AG_OK;
    }
    return AG_ERR_ARG;
}

ag_status ag__spec_apply(const char *what, const char *name, const char *list, const opt_field *fields,
                         int n_fields) {
    bool seen[32] = {0};
    if (n_fields > 32) ag__fatal("options", "too many fields (%d)", n_fields);
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        size_t key_len = (size_t)((eq ? eq : end) - p);
        if (key_len == 0) return ag__fail(AG_ERR_ARG, "%s '%s': empty key in '%s'", what, name, list);
        const opt_field *f = find_field(fields, n_fields, p, key_len);
        if (!f) {
            char known[256];
            known_keys(fields, n_fields, known, sizeof known);
            return ag__fail(AG_ERR_ARG, "%s '%s': unknown key '%.*s' (it takes: %s)", what, name, (int)key_len, p,
                            n_fields ? known : "no keys");
        }
        if (!eq) return ag__fail(AG_ERR_ARG, "%s '%s': key '%s' has no value (write %s=...)", what, name, f->key, f->key);
        if (seen[f - fields]) return ag__fail(AG_ERR_ARG, "%s '%s': key '%s' given twice", what, name, f->key);
        seen[f - fields] = true;
        ag_status st = set_value(what, name, f, eq + 1, (size_t)(end - eq - 1));
        if (st) return st;
        p = *end ? end + 1 : end;
        if (*end && !*p) return ag__fail(AG_ERR_ARG, "%s '%s': trailing ',' in '%s'", what, name, list);
    }
    return AG_OK;
}

const char *ag__fmt_real(double x, char *buf, size_t n) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

const char *ag__spec_format(const char *name, const opt_field *fields, int n_fields, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s", name);
    for (int i = 0; i < n_fields && k < n; i++) {
        const opt_field *f = &fields[i];
        char v[40];
        switch (f->type) {
        case OPT_REAL: ag__fmt_real(*(double *)f->dst, v, sizeof v); break;
        case OPT_INT: snprintf(v, sizeof v, "%d", *(int *)f->dst); break;
        case OPT_BOOL: snprintf(v, sizeof v, "%d", *(bool *)f->dst ? 1 : 0); break;
        case OPT_CHOICE: snprintf(v, sizeof v, "%s", f->choices[*(bool *)f->dst ? 1 : 0]); break;
        }
        k += (size_t)snprintf(buf + k, n - k, "%c%s=%s", i ? ',' : ':', f->key, v);
    }
    return buf;
}
