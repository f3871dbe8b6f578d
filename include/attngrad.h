/* attngrad.h - the one public header of attngrad.
 *
 * attngrad is a define-by-run, tape-based reverse-mode autodiff library in C,
 * specialised for attention networks.  The whole model of use fits in five lines:
 *
 *     ag_tensor *W = ag_param(&params, "w", 2, (int[]){4, 3}); // persistent
 *     ag_tensor *x = ag_tensor_from(data, 2, (int[]){8, 4});   // per-step
 *     ag_tensor *loss = ag_cross_entropy(ag_matmul(x, W), labels, -1);
 *     ag_backward(loss);                                       // grads in W->grad
 *     ag_optim_step(&opt); ag_step_end();                      // update, free the step
 *
 * Memory.  Parameters are persistent (malloc'd once).  Everything else made
 * during a step - activations, their gradients, tape nodes, scratch - comes
 * from one per-step arena, and ag_step_end() rewinds it.  After the first
 * couple of steps of a fixed-shape loop the arena has grown to its high-water
 * mark and a step performs no heap allocation at all.  A tensor from the arena
 * dies at ag_step_end(): every op and ag_backward refuse it afterwards,
 * naming the op that made it and its step.
 *
 * Precision.  `ag_real` is float, or double when compiled with
 * -DAG_REAL_DOUBLE.  The library is built twice from the same sources:
 * libattngrad for training, libattngrad-f64 for gradient checks.
 *
 * Errors.  Programmer errors (shape or device mismatch, bad axis) stop the
 * program with a message that names the op, the shapes and the caller's
 * file:line.  Functions that read user input (files, checkpoints, options)
 * return AG_OK or a negative ag_status and leave a message in ag_errmsg().
 *
 * Broadcasting (add, sub, mul, div, maximum): NumPy rules.  Shapes are
 * aligned at the right; each pair of dims must be equal or one of them 1;
 * missing leading dims count as 1.  So [B,N,d] + [d] adds a vector to every
 * row, [B,N,d] * [B,N,1] scales rows, [B,h,N,N] + [N,N] adds a mask to every
 * batch and head.  Gradients are summed back over broadcast dims.
 */
#ifndef ATTNGRAD_H
#define ATTNGRAD_H

/* One header per concern, each standing alone:
 *   attngrad/core.h        tensors, the tape, every op, custom ops, gradient checks
 *   attngrad/optim.h       optimizers, schedules, initializers
 *   attngrad/checkpoint.h  safetensors files and checkpoints
 *   attngrad/layers.h      parameter makers and attention layers
 * and, for whole models, attngrad/data.h, attngrad/model.h, attngrad/train.h. */
#include "attngrad/core.h"
#include "attngrad/optim.h"
#include "attngrad/checkpoint.h"
#include "attngrad/layers.h"

#endif /* ATTNGRAD_H */
