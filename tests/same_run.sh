# same_run.sh - two training runs' files compared, for the shell tests
# that check two ways of running give one run (test_mpi.sh: ranks against
# one process; test_micro_batch.sh: a batch in parts against whole).
# Sourced; each function returns non-zero on a difference, which it prints.

# The columns that must agree of metrics.csv or steps.csv (all but seconds), one per line.
metrics() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i != "seconds") keep[i] = 1; next }
                     { for (i = 1; i <= NF; i++) if (keep[i]) print $i }' "$1"; }

# same_metrics A B TOL: every number within TOL relative (or 1e-12 absolute).
same_metrics() {
  paste <(metrics "$1") <(metrics "$2") | awk -v tol="$3" '
    { d = $1 - $2; d = d < 0 ? -d : d; s = $1 < 0 ? -$1 : $1; if (d > tol * s && d > 1e-12) { bad++; print "  metrics differ: " $1 " against " $2 } }
    END { exit bad > 0 }'
}

# same_steps DIR_A DIR_B TOL: the same rows of steps.csv (a second writer would add rows).
same_steps() {
  [ "$(wc -l < "$1/steps.csv")" -eq "$(wc -l < "$2/steps.csv")" ] && same_metrics "$1/steps.csv" "$2/steps.csv" "$3" ||
    { echo "  steps.csv: $(wc -l < "$1/steps.csv") lines against $(wc -l < "$2/steps.csv")"; return 1; }
}
