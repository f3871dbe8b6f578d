/* registry.c - the model kinds known to this program: the five built-in
 * ones, then whatever a program or a plugin registers.  The built-in kinds
 * go through ag_model_register like any other, so what it checks holds
 * for all of them. */
#include "attngrad/model.h"
#include "internal.h"
#include "../graph/internal.h" /* ag__fatal: a built-in kind the registry refuses is a bug of ours */
#include "../optim/options.h"   /* ag__optim_rule_count: a plugin's optimizer rules keep it loaded too */

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

extern const ag_model_kind ag__mpsan_kind;
extern const ag_model_kind ag__dual_axial_kind;
extern const ag_model_kind ag__ms_san_kind;
extern const ag_model_kind ag__mtsa_kind;
extern const ag_model_kind ag__poslm_kind;

static const ag_model_kind *kinds[AG_MODEL_MAX_KINDS + 1]; /* NULL-terminated */
static int n_kinds;

/* The name is what --model, the run folders and the checkpoints' config
 * carry: it must fit AG_MODEL_NAME_MAX and read back from "key=value". */
static bool good_name(const char *name) { return ag__is_name(name, AG_MODEL_NAME_MAX); }

/* What is wrong with a kind's list of own names (--flags switches, or
 * --hparams settings), or NULL. */
static const char *names_problem(const char *list, bool flags) {
    static const char malformed[] = "names are lower-case letters, digits and '_', separated by ','";
    if (!list) return NULL;
    if (!*list || list[strlen(list) - 1] == ',') return malformed;
    int count = 0;
    for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',', count++) {
        size_t len = strcspn(p, ",");
        if (len == 0 || strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_") < len) return malformed;
        if (flags && ag__flag_is_builtin(p, len)) return "a name of a built-in model's flag (names must say one thing)";
        for (const char *q = list; q < p; q += strcspn(q, ","), q += *q == ',')
            if (strcspn(q, ",") == len && !strncmp(q, p, len)) return "a name given twice";
    }
    return flags && count > AG_FLAG_OWN_MAX ? "more than 16 names" : NULL;
}

static ag_status add(const ag_model_kind *kind) {
    if (!kind) return ag_fail(AG_ERR_ARG, "ag_model_register: kind is NULL");
    /* .abi first: it is read before anything whose place may differ */
    if (kind->abi == 0) /* left out of the initializer: the layout is this one, only unmarked */
        return ag_fail(AG_ERR_ARG, "ag_model_register: kind '%.40s' has no .abi: set .abi = AG_MODEL_ABI",
                       kind->name ? kind->name : "(NULL)");
    int version = kind->abi / 100, real = kind->abi % 100;
    if (version >= 1 && version < AG_MODEL_API_OLDEST && real == (int)sizeof(ag_real))
        return ag_fail(AG_ERR_ARG,
                       "ag_model_register: kind '%.40s' was built against model API %d, but ag_model's layout changed "
                       "since (its config grew in API 3 and 4, moving m->params, m->rng and m->impl): rebuild it "
                       "against this attngrad (its source compiles unchanged)",
                       kind->name ? kind->name : "(NULL)", version);
    if (!(version >= 1 && version <= AG_MODEL_API_VERSION && real == (int)sizeof(ag_real))) {
        return ag_fail(AG_ERR_ARG,
                       "ag_model_register: a kind built against model API %d with %d-byte ag_real (abi %d), but this "
                       "program has API %d with %d-byte ag_real (abi %d): rebuild it against this attngrad%s",
                       version, real, kind->abi, AG_MODEL_API_VERSION, (int)sizeof(ag_real), AG_MODEL_ABI,
                       version >= 1 && version <= AG_MODEL_API_VERSION && real != (int)sizeof(ag_real)
                           ? (sizeof(ag_real) == 8 ? " with -DAG_REAL_DOUBLE" : " without -DAG_REAL_DOUBLE")
                           : "");
    }
    if (!kind->name || !good_name(kind->name))
        return ag_fail(AG_ERR_ARG, "ag_model_register: kind name '%.40s' is not 1-31 letters, digits, '_' or '-'",
                       kind->name ? kind->name : "(NULL)");
    const char *missing = !kind->build ? "build" : !kind->forward ? "forward" : NULL;
    if (missing) return ag_fail(AG_ERR_ARG, "ag_model_register: kind '%s' has no %s callback", kind->name, missing);
    const char *bad_flags = names_problem(kind->flag_names, true);
    if (bad_flags) return ag_fail(AG_ERR_ARG, "ag_model_register: kind '%s': flag_names \"%.80s\": %s", kind->name,
                                  kind->flag_names, bad_flags);
    const char *bad_hparams = names_problem(ag__kind_hparams(kind), false);
    if (bad_hparams) return ag_fail(AG_ERR_ARG, "ag_model_register: kind '%s': hparams \"%.80s\": %s", kind->name,
                                    kind->hparams, bad_hparams);
    if (!(kind->tasks & (AG_TASK_BIT(AG_TASK_COUNT) - 1)))
        return ag_fail(AG_ERR_ARG, "ag_model_register: kind '%s' lists no task in .tasks (AG_TASK_BIT(AG_TASK_...))",
                       kind->name);
    int lm_calls = version >= 2 ? !!kind->lm_state_new + !!kind->lm_feed + !!kind->lm_state_free : 0;
    if (lm_calls % 3)
        return ag_fail(AG_ERR_ARG, "ag_model_register: kind '%s' has %d of lm_state_new, lm_feed and lm_state_free: "
                       "give all three or none", kind->name, lm_calls);
    for (int i = 0; i < n_kinds; i++)
        if (!strcmp(kinds[i]->name, kind->name))
            return ag_fail(AG_ERR_ARG, "ag_model_register: a model named '%s' is already registered", kind->name);
    if (n_kinds == AG_MODEL_MAX_KINDS)
        return ag_fail(AG_ERR_ARG, "ag_model_register: '%s': the registry is full (%d kinds)", kind->name,
                       AG_MODEL_MAX_KINDS);
    kinds[n_kinds++] = kind;
    return AG_OK;
}

bool ag__kind_feeds(const ag_model_kind *kind) {
    return kind->abi / 100 >= 2 && kind->lm_feed; /* an API 1 kind's struct ends before lm_* */
}

/* The built-in kinds, before anything else can be registered or looked up. */
static void register_builtins(void) {
    static bool done;
    if (done) return;
    done = true;
    const ag_model_kind *builtin[] = {&ag__mpsan_kind, &ag__dual_axial_kind, &ag__ms_san_kind, &ag__mtsa_kind,
                                      &ag__poslm_kind};
    for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++)
        if (add(builtin[i]) != AG_OK) ag__fatal("ag_model_register", "built-in model: %s", ag_errmsg());
}

ag_status ag_model_register(const ag_model_kind *kind) {
    register_builtins();
    return add(kind);
}

const ag_model_kind *const *ag_model_kinds(void) {
    register_builtins();
    return kinds;
}

const ag_model_kind *ag_model_find(const char *name) {
    register_builtins();
    for (int i = 0; i < n_kinds; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

/* ---- plugins ---- */

/* The double program loads "x.so" as "x-f64.so" when there is one: the
 * same plugin compiled with -DAG_REAL_DOUBLE (see the header). */
static const char *real_type_variant(const char *path, char *buf, size_t n) {
    if (sizeof(ag_real) != sizeof(double)) return path; /* the float program loads path as given */
    size_t len = strlen(path);
    if (len < 3 || strcmp(path + len - 3, ".so") || (len >= 7 && !strcmp(path + len - 7, "-f64.so"))) return path;
    if ((size_t)snprintf(buf, n, "%.*s-f64.so", (int)(len - 3), path) >= n || access(buf, F_OK)) return path;
    return buf;
}

ag_status ag_model_load_plugin(const char *path) {
    register_builtins(); /* a plugin's kind named like a built-in one is a duplicate, whatever the order */
    char variant[4096], local[4096];
    const char *file = real_type_variant(path, variant, sizeof variant);
    /* a bare name would make dlopen search the library path, not the folder the user means */
    if (!strchr(file, '/') && (size_t)snprintf(local, sizeof local, "./%s", file) < sizeof local) file = local;
    void *so = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        const char *why = dlerror();
        if (why && strstr(why, "ag_link_with_attngrad_f")) /* attngrad.h's real-type guard (graph/tensor.c) */
            return ag_fail(AG_ERR_ARG, "plugin %s was built with %d-byte ag_real (the other library), but this program has %d-byte ag_real: "
                           "rebuild it against this attngrad%s", file, sizeof(ag_real) == 8 ? 4 : 8,
                           (int)sizeof(ag_real), sizeof(ag_real) == 8 ? " with -DAG_REAL_DOUBLE" : " without -DAG_REAL_DOUBLE");
        return ag_fail(AG_ERR_IO, "plugin %s: %s", path, why ? why : "dlopen failed");
    }
    ag_status (*init)(void);
    *(void **)&init = dlsym(so, "ag_plugin_init"); /* the cast POSIX prescribes for function pointers */
    if (!init) {
        dlclose(so);
        return ag_fail(AG_ERR_ARG, "plugin %s: no ag_plugin_init (it must export ag_status ag_plugin_init(void))", file);
    }
    int before = n_kinds, rules_before = ag__optim_rule_count();
    ag_status st = init();
    if (st != AG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ag_errmsg());
        /* its kinds and optimizer rules registered before the failure stay: their code must stay loaded too */
        if (n_kinds == before && ag__optim_rule_count() == rules_before) dlclose(so);
        return ag_fail(st, "plugin %s: ag_plugin_init failed: %s", file, why);
    }
    return AG_OK; /* never closed: its kinds and rules point into it */
}
