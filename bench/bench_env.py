"""bench_env.py - what every PyTorch race here sets before it measures: the
same thread count for both sides (the BLAS libraries' variables, which the
attngrad child process inherits, and torch.set_num_threads) and the same
CPUs (--taskset, this process's affinity, which the child inherits)."""
import os

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def same_threads(threads, taskset=None):
    """Pins this process (and its children) to `threads` threads and the
    CPUs of `taskset` ("1" or "0,1"; None: all); returns torch, or None
    where it is not installed."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    if taskset is not None:
        os.sched_setaffinity(0, {int(c) for c in taskset.split(",")})
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch
