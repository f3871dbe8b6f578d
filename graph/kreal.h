/* kreal.h - what an op family's kernel interface (ops/<family>.h) may use:
 * the real type and the C linkage, the same for the C ops and the CUDA C++
 * kernels, which never include attngrad.h. */
#ifndef AG_KREAL_H
#define AG_KREAL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef AG_REAL_DOUBLE
typedef double ag__kreal;
#else
typedef float ag__kreal;
#endif

#ifdef __cplusplus
#define AG_KERNELS_BEGIN extern "C" {
#define AG_KERNELS_END }
#else
#define AG_KERNELS_BEGIN
#define AG_KERNELS_END
#endif

#endif
