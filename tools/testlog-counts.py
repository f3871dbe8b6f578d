#!/usr/bin/env python3
"""Counts of a meson testlog.json: prints "passed failed skipped".

A skipped test (exit 77: no GPU, no numpy, ...) is counted apart, never as a
pass.  Used by tools/test-all.sh and tools/gpu-check.sh."""
import json
import sys

passed = failed = skipped = 0
for line in open(sys.argv[1]):
    result = json.loads(line)["result"]
    if result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif result == "SKIP":
        skipped += 1
    else:
        failed += 1
print(passed, failed, skipped)
