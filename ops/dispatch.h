/* dispatch.h - one dispatch per op family: how an op finds the kernels of
 * its operands' device.
 *
 * A family (softmax, loss, ...) declares its kernels once, as a struct of
 * function pointers in ops/<family>.h.  ops/<family>.c fills one for the
 * CPU, beside the op bodies; ops/cuda/<family>.cu fills one for CUDA.  An
 * op body checks its operands, asks AG_DISPATCH's lookup for the table of
 * their device and calls it: the same code for every device, no `if` on
 * the device.  A build without CUDA has no CUDA tables; an op asked for one
 * refuses, naming itself (no tensor gets there: ag_to and ag_set_device
 * refuse the device first).
 *
 * Kernels take raw pointers in the device's memory and sizes, return at
 * once (CUDA: queued on the engine's stream), and are checked for launch
 * errors where the op records its output (graph/tape.c). */
#ifndef AG_OPS_DISPATCH_H
#define AG_OPS_DISPATCH_H

#include "../graph/internal.h"

#ifdef AG_HAVE_CUDA
#define AG_CUDA_TABLE(table) (&(table))
#else
#define AG_CUDA_TABLE(table) NULL
#endif

/* The table of dev among tables[AG_CPU], tables[AG_CUDA]; fatal, naming op
 * and family, when this build has none. */
const void *ag__kernels_on(const char *op, const char *family, const void *const *tables, ag_device dev);

/* Defines ag__<family>_on(op, dev), the lookup of a family's tables (its
 * declaration is in ops/<family>.h): the CPU's (a static struct of the .c
 * file) and CUDA's (ag__<family>_cuda, defined in ops/cuda/<family>.cu,
 * absent from a CPU-only build). */
#define AG_DISPATCH(family, cpu_table)                                                               \
    const ag__##family##_kernels *ag__##family##_on(const char *op, ag_device dev) {                 \
        static const void *const tables[] = {[AG_CPU] = &(cpu_table),                                \
                                             [AG_CUDA] = AG_CUDA_TABLE(ag__##family##_cuda)};        \
        return (const ag__##family##_kernels *)ag__kernels_on(op, #family, tables, dev);             \
    }

/* Step memory on a device (the step arena of the CPU or of the GPU), and n
 * int32 values from the host copied into it: an op's lengths or labels,
 * kept for its backward (the caller's array may change before it runs). */
void *ag__step_alloc_on(ag_device dev, size_t bytes);
int32_t *ag__step_i32_on(ag_device dev, const int32_t *host, int64_t n);
/* The same for any bytes (at least one allocated): a loss's target. */
void *ag__step_copy_on(ag_device dev, const void *host, size_t bytes);

#endif
