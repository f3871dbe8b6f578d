/* blas.c - the BLAS as attngrad finds it, set up once before its first
 * product: OpenBLAS single-threaded (graph/parallel.c says why), and on
 * kernels that fit the CPU.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's, Ubuntu's, Fedora's) picks its
 * kernels at load time from the CPU's model number.  A release older than
 * the CPU does not know its model and falls back to its generic x86-64
 * kernels: OpenBLAS 0.3.21 (Debian 12) runs Prescott's SSE3 kernels on
 * Intel's Emerald Rapids (family 6, model 207), 32 GFLOP/s where its
 * Cooperlake kernels give 156 on one core (bench_models --peak-only,
 * 2026-12-05): every product of a step 5x slower, with nothing said.  So
 * when the kernels it chose use no AVX2 and the CPU has AVX2 and FMA,
 * attngrad asks it, once, for the kernels it names for the CPU's vector
 * units - unless OPENBLAS_CORETYPE is set: then the choice is the user's.
 * It does that with gotoblas_dynamic_quit and gotoblas_dynamic_init, which
 * every DYNAMIC_ARCH build exports and which re-read OPENBLAS_CORETYPE as at
 * load; a build without them (one target, or another BLAS) is left alone.
 *
 * Nothing else in the process may be inside OpenBLAS at that moment: the
 * setup runs at attngrad's first product or thread setting, normally
 * before any work, and stops OpenBLAS's own threads first. */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strcasecmp */

#ifdef AG_HAVE_OPENBLAS_THREADS
#include <cblas.h>
/* OpenBLAS's own: in every build (openblas_*), in DYNAMIC_ARCH builds only
 * (gotoblas_*); weak, so that a build without them links and finds NULL */
char *openblas_get_corename(void) __attribute__((weak));
char *openblas_get_config(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
int blas_thread_shutdown_(void) __attribute__((weak)); /* pthreads builds: stops its server threads */
#endif

static char blas_info[160] = "a CBLAS (not OpenBLAS)";
static bool blas_wide; /* OpenBLAS runs 512-bit kernels */

#if defined(AG_HAVE_OPENBLAS_THREADS) && defined(__x86_64__) && defined(__GNUC__)
/* OpenBLAS's x86-64 kernel sets that use AVX2 and FMA (or AVX-512). */
static bool vector_kernels(const char *core) {
    static const char *const fast[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof fast / sizeof *fast; i++)
        if (!strcasecmp(core, fast[i])) return true;
    return false;
}

/* The kernel set OpenBLAS 0.3.x names for this CPU's vector units. */
static const char *kernels_for_cpu(void) {
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (avx512) return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

/* Kernels OpenBLAS chose that use no AVX2 on a CPU that has it: the ones
 * it names for the CPU instead.  took[] gets the set it had chosen. */
static bool choose_kernels(char *took, size_t n) {
    if (!openblas_get_corename || !gotoblas_dynamic_init || !gotoblas_dynamic_quit || getenv("OPENBLAS_CORETYPE"))
        return false;
    snprintf(took, n, "%s", openblas_get_corename());
    const char *want = kernels_for_cpu();
    if (!want || vector_kernels(took)) return false;
    /* The pthreads build starts its server threads at load, and each one's
     * first act is blas_memory_alloc, which runs gotoblas_dynamic_init if
     * it finds the kernel table unset: on a loaded machine one could start
     * inside our quit-init window, store get_coretype()'s NULL (unknown
     * CPU) over our choice and crash us (1 start in ~900 under load), or
     * leave its Prescott table.  They are stopped first; OpenBLAS is at
     * one thread already (setup), so none is started again. */
    if (blas_thread_shutdown_) blas_thread_shutdown_();
    setenv("OPENBLAS_CORETYPE", want, 0); /* what gotoblas_dynamic_init reads */
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE"); /* the process's children choose for themselves */
    return true;
}
#elif defined(AG_HAVE_OPENBLAS_THREADS)
static bool choose_kernels(char *took, size_t n) { return (void)took, (void)n, false; }
#endif

/* blas_info: "OpenBLAS 0.3.21, Cooperlake kernels (chosen by attngrad: ...)" */
static void setup(void) {
#ifdef AG_HAVE_OPENBLAS_THREADS
    /* first: it starts OpenBLAS's server threads again where they were
     * stopped, and choose_kernels stops them for good */
    openblas_set_num_threads(1);
    char took[32];
    bool chose = choose_kernels(took, sizeof took);
    const char *config = openblas_get_config ? openblas_get_config() : "OpenBLAS"; /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." */
    int version = (int)strcspn(config, " ");
    version += config[version] ? 1 + (int)strcspn(config + version + 1, " ") : 0;
    int k = snprintf(blas_info, sizeof blas_info, "%.*s, %s kernels", version, config,
                     openblas_get_corename ? openblas_get_corename() : "its own");
    if (chose)
        snprintf(blas_info + k, sizeof blas_info - (size_t)k, " (chosen by attngrad: OpenBLAS took %s, which lacks "
                 "this CPU's AVX2)", took);
    const char *core = openblas_get_corename ? openblas_get_corename() : "";
    blas_wide = !strcasecmp(core, "SkylakeX") || !strcasecmp(core, "Cooperlake") || !strcasecmp(core, "SapphireRapids");
#endif
}

void ag__blas_setup(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, setup);
}

bool ag__blas_wide(void) {
    ag__blas_setup();
    return blas_wide;
}

const char *ag_blas_info(void) {
    ag__blas_setup();
    return blas_info;
}
