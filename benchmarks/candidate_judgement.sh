#!/usr/bin/env bash
# The judgement of a round whose candidate would replace the recommended method (docs/suite-rounds.md,
# rounds 9 and 10), one command from the committed records, on the tasks where the candidate has
# records (a part of the suite while its lane runs):
#
#   bash benchmarks/candidate_judgement.sh matchopt-ens-mix-near-mid [matchopt-ens-mix-near]
#
# (1) the summary of `matchopt report` twice, the candidate and then the incumbent among the
# compared baselines (the mean of the MNRs at p100 and p50 is criterion 1's figure); (2) the
# (task, percentile) cells where the candidate's mean falls below the incumbent's by more than
# two standard errors (benchmarks/cell_drops.py). Reads records only; nothing is written.
# RESULTS (default results/dev), BASELINES (the compared baselines) and PYTHON may be set.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
    echo "usage: bash benchmarks/candidate_judgement.sh CANDIDATE [INCUMBENT]" >&2
    exit 2
fi
CANDIDATE="$1"
INCUMBENT="${2:-matchopt-ens-mix-near}"
RESULTS="${RESULTS:-results/dev}"
PYTHON="${PYTHON:-python}"
MATCHOPT="${MATCHOPT:-$PYTHON -m matchopt.cli}"
BASELINES="${BASELINES:-matchopt,ens-mean,ens-min,ga,bdi,cma-es,roma,random,untrained}"

# Records lie at <folder>/<task>/<method>/seed<k>.json below $RESULTS.
tasks=$(find "$RESULTS" -path "*/$CANDIDATE/seed*.json" | awk -F/ '{print $(NF-2)}' | sort -u |
    paste -sd, -)
if [ -z "$tasks" ]; then
    echo "no records of $CANDIDATE under $RESULTS" >&2
    exit 1
fi
echo "tasks with records of $CANDIDATE: $tasks"
for method in "$CANDIDATE" "$INCUMBENT"; do
    echo
    echo "## $method among the compared baselines"
    $MATCHOPT report "$RESULTS" --summary --tasks "$tasks" --methods "$method,$BASELINES" |
        grep -E "^\| (Method|$method) "
done
echo
$PYTHON benchmarks/cell_drops.py "$RESULTS" "$CANDIDATE" "$INCUMBENT"
