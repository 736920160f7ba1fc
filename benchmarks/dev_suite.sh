#!/usr/bin/env bash
# The development-suite comparison (docs/suite-rounds.md, round 2): every compared method on every task
# of `matchopt bench --suite dev`, in two lanes of one thread each (this 2-core machine; two
# CPU-bound jobs with more threads collapse). Resumable: every cell is recorded when it ends and
# long cells keep training snapshots, so rerunning this script continues where it stopped.
#
#   bash benchmarks/dev_suite.sh            # both lanes, then the report
#   LANE=candidates bash benchmarks/dev_suite.sh   # one lane only (candidates |
#                                                  # hopper-candidates | baselines |
#                                                  # round3 | round3-hopper |
#                                                  # round4 | round4-hopper |
#                                                  # extended-replicates | extended-utr |
#                                                  # round5 | round5-hopper | pool |
#                                                  # round6 | round6-hopper |
#                                                  # round7 | round7-second |
#                                                  # round8 | round8-hopper |
#                                                  # landscapes | round9 | round10 |
#                                                  # round11 | round12)
#
# Run it from a `git archive` of the commit (records name it; a checkout edited during a long
# run would mix code): PYTHONPATH=/tmp/archive/src bash benchmarks/dev_suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-results/dev}"
LANE="${LANE:-both}"
LOG_DIR="${LOG_DIR:-/tmp}"  # each lane's progress, with LANE=both
MATCHOPT="${MATCHOPT:-python -m matchopt.cli}"
COMPARED_BASELINES="matchopt,ens-mean,ens-min,ga,bdi,cma-es,roma,random,untrained"
NEW_TASKS="ehrlich-4x16,ehrlich-4x32,ehrlich-20x64,hartmann6,rosenbrock20,levy40"
QUICK_TASKS="tfbind8,potts,styblinski-tang,$NEW_TASKS"  # the suite without hopper-local
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# The records of results/main for the compared methods on the suite's older tasks (same code
# paths and presets; 4 seeds there) are copied in, never overwritten.
for task in tfbind8 potts styblinski-tang hopper-local; do
    for method in ${COMPARED_BASELINES//,/ }; do
        if [ -d "results/main/$task/$method" ]; then
            mkdir -p "$OUT/main/$task"
            cp -rn "results/main/$task/$method" "$OUT/main/$task/"
        fi
    done
done

candidates() {
    # Seeds 0-2 on the nine quick tasks (one candidate after the other, so that a lane cut short
    # leaves whole rows), then seed 3 where results/main has 4 seeds of the baselines.
    for method in matchopt-ens matchopt-ens-rank; do
        $MATCHOPT bench --tasks "$QUICK_TASKS" --methods "$method" --seeds 0,1,2 \
            --out "$OUT/candidates" --threads 1 --workers 1
    done
    $MATCHOPT bench --tasks tfbind8,potts,styblinski-tang --methods matchopt-ens,matchopt-ens-rank \
        --seeds 3 --out "$OUT/candidates" --threads 1 --workers 1
}

hopper_candidates() {
    # hopper-local (about 10 times the cost of any other task) in a folder of its own, so that
    # it can run as a lane beside the others (a bench locks its results folder).
    $MATCHOPT bench --tasks hopper-local --methods matchopt-ens,matchopt-ens-rank --seeds 0,1,2 \
        --out "$OUT/candidates-hopper" --threads 1 --workers 1
}

baselines() {
    $MATCHOPT bench --tasks "$NEW_TASKS" --methods "$COMPARED_BASELINES" \
        --seeds 0,1,2 --out "$OUT/baselines" --threads 1 --workers 1
    # hopper-local: matchopt, ga and random are in results/main (4 seeds); cma-es is left out
    # (about 3.5 h per seed: pycma's covariance update at d = 5,126).
    $MATCHOPT bench --tasks hopper-local --methods ens-mean,ens-min,bdi,roma,untrained \
        --seeds 0,1,2 --out "$OUT/hopper" --threads 1 --workers 1
}

# The real-assay and replicate-noise tasks added to the suite (docs/suite-rounds.md, "The extended
# suite"): the compared baselines and the recommended method, seeds 0-2. The methods that fit
# their own surrogates first, then the three that share a Gaussian ensemble (the costliest).
EXTENDED_FIRST="matchopt-ens-mix,matchopt,cma-es,bdi,roma,random,untrained"
EXTENDED_SHARED="ens-mean,ens-min,ga"

extended() {
    $MATCHOPT bench --tasks "$1" --methods "$EXTENDED_FIRST" --seeds 0,1,2 \
        --out "$OUT/$2" --threads 1 --workers 1
    $MATCHOPT bench --tasks "$1" --methods "$EXTENDED_SHARED" --seeds 0,1,2 \
        --out "$OUT/$2" --threads 1 --workers 1
}

later_round() {
    # A later round's candidate $1 (docs/suite-rounds.md) with round 2's seeds into $OUT/$2: the
    # continuous tasks first (the trust regions bound continuous searches only), then the token
    # tasks, then seed 3.
    $MATCHOPT bench --tasks styblinski-tang,hartmann6,rosenbrock20,levy40 \
        --methods "$1" --seeds 0,1,2 --out "$OUT/$2" --threads 1 --workers 1
    $MATCHOPT bench --tasks tfbind8,potts,ehrlich-4x16,ehrlich-4x32,ehrlich-20x64 \
        --methods "$1" --seeds 0,1,2 --out "$OUT/$2" --threads 1 --workers 1
    $MATCHOPT bench --tasks tfbind8,potts,styblinski-tang --methods "$1" \
        --seeds 3 --out "$OUT/$2" --threads 1 --workers 1
}

round5_extended() {
    # Round 5 onward: the extended suite's tasks too (the candidate $1 into $OUT/$2).
    later_round "$1" "$2"
    $MATCHOPT bench --tasks tfbind8-replicates,potts-replicates,utr \
        --methods "$1" --seeds 0,1,2 --out "$OUT/$2" --threads 1 --workers 1
}

pool() {
    # The members of `auto`'s pool that are not compared methods, alone on round 5's cells, to
    # measure how often its protocol picks the leader (docs/suite-rounds.md, round 5).
    $MATCHOPT bench --tasks "$QUICK_TASKS,tfbind8-replicates,potts-replicates,utr,hopper-local" \
        --methods ens-mean-small --seeds 0,1,2 --out "$OUT/pool" --threads 1 --workers 1
    $MATCHOPT bench --tasks tfbind8,potts,styblinski-tang --methods ens-mean-small \
        --seeds 3 --out "$OUT/pool" --threads 1 --workers 1
}

round7() {
    # Round 7 (docs/suite-rounds.md) in two lanes: the tasks whose offline rows repeat designs first
    # (where the candidate's data differ), then the rest of the suite.
    $MATCHOPT bench --tasks tfbind8-replicates,potts-replicates,tfbind8,ehrlich-4x16,ehrlich-4x32 \
        --methods "$1" --seeds 0,1,2 --out "$OUT/candidates-r7" --threads 1 --workers 1
    $MATCHOPT bench --tasks tfbind8 --methods "$1" --seeds 3 --out "$OUT/candidates-r7" \
        --threads 1 --workers 1
    $MATCHOPT bench --tasks potts,ehrlich-20x64,styblinski-tang,hartmann6 \
        --methods "$1" --seeds 0,1,2 --out "$OUT/candidates-r7" --threads 1 --workers 1
    $MATCHOPT bench --tasks potts,styblinski-tang --methods "$1" --seeds 3 \
        --out "$OUT/candidates-r7" --threads 1 --workers 1
}

round7_second() {
    $MATCHOPT bench --tasks utr,levy40,rosenbrock20,hopper-local --methods "$1" --seeds 0,1,2 \
        --out "$OUT/candidates-r7-second" --threads 1 --workers 1
}

LANDSCAPE_TASKS="pard3-screen pard3 tev-screen phoq-screen tev phoq"  # smallest tables first
LANDSCAPE_FIRST="matchopt-ens-mix-near,random,untrained,bdi,roma,cma-es,matchopt,matchopt-ens-mix"

landscapes() {
    # The protein landscapes (docs/suite-rounds.md, "The enlarged suite"), one task at a time so that a
    # lane cut short leaves whole task rows: the compared methods and candidates, seeds 0-2,
    # into $OUT/landscapes; the three methods sharing a Gaussian ensemble after the others of
    # their task, `auto` (which trains its whole pool) last.
    for task in $LANDSCAPE_TASKS; do
        $MATCHOPT bench --tasks "$task" --methods "$LANDSCAPE_FIRST" --seeds 0,1,2 \
            --out "$OUT/landscapes" --threads 1 --workers 1
        $MATCHOPT bench --tasks "$task" --methods "$EXTENDED_SHARED" --seeds 0,1,2 \
            --out "$OUT/landscapes" --threads 1 --workers 1
    done
    for task in $LANDSCAPE_TASKS; do
        $MATCHOPT bench --tasks "$task" --methods auto --seeds 0,1,2 \
            --out "$OUT/landscapes" --threads 1 --workers 1
    done
}

enlarged_suite_round() {
    # The candidate $1 on every task of the enlarged suite, seeds 0-2 (and seed 3 where the
    # recommended method has it), into $OUT/$2; hopper-local last (the costliest).
    round5_extended "$1" "$2"
    for task in $LANDSCAPE_TASKS; do
        $MATCHOPT bench --tasks "$task" --methods "$1" --seeds 0,1,2 \
            --out "$OUT/$2" --threads 1 --workers 1
    done
    $MATCHOPT bench --tasks hopper-local --methods "$1" --seeds 0,1,2 \
        --out "$OUT/$2" --threads 1 --workers 1
}

round10() {
    # Round 10 (docs/suite-rounds.md): first the cells where round 9's candidate fell (tfbind8
    # and potts, seeds 0-3), then round 9's order.
    $MATCHOPT bench --tasks tfbind8,potts --methods "$1" --seeds 0,1,2,3 \
        --out "$OUT/candidates-r10" --threads 1 --workers 1
    enlarged_suite_round "$1" candidates-r10
}

where_rounds_fell() {
    # The cells where rounds 9 and 10 fell, for the candidate $1 into $OUT/$2: hartmann6 and
    # rosenbrock20 (seeds 0-2), tfbind8 and potts (seeds 0-3).
    $MATCHOPT bench --tasks hartmann6,rosenbrock20 --methods "$1" --seeds 0,1,2 \
        --out "$OUT/$2" --threads 1 --workers 1
    $MATCHOPT bench --tasks tfbind8,potts --methods "$1" --seeds 0,1,2,3 \
        --out "$OUT/$2" --threads 1 --workers 1
}

round11() {
    # Round 11 (docs/suite-rounds.md): first where rounds 9 and 10 fell, then round 9's order.
    where_rounds_fell "$1" candidates-r11
    enlarged_suite_round "$1" candidates-r11
}

round12() {
    # Round 12 (docs/suite-rounds.md): first where rounds 9 and 10 fell, then hopper-local (where
    # round 11 fell; at 800 steps no longer the costliest), then the rest of the suite.
    where_rounds_fell "$1" candidates-r12
    $MATCHOPT bench --tasks hopper-local --methods "$1" --seeds 0,1,2 \
        --out "$OUT/candidates-r12" --threads 1 --workers 1
    enlarged_suite_round "$1" candidates-r12
}

later_round_hopper() {
    $MATCHOPT bench --tasks hopper-local --methods "$1" --seeds 0,1,2 \
        --out "$OUT/$2-hopper" --threads 1 --workers 1
}

case "$LANE" in
    candidates) candidates ;;
    hopper-candidates) hopper_candidates ;;
    baselines) baselines ;;
    round3) later_round matchopt-ens-l2 candidates-r3 ;;
    round3-hopper) later_round_hopper matchopt-ens-l2 candidates-r3 ;;
    round4) later_round matchopt-ens-mix candidates-r4 ;;
    round4-hopper) later_round_hopper matchopt-ens-mix candidates-r4 ;;
    extended-replicates) extended tfbind8-replicates,potts-replicates extended-replicates ;;
    extended-utr) extended utr extended-utr ;;
    round5) round5_extended auto candidates-r5 ;;
    round5-hopper) later_round_hopper auto candidates-r5 ;;
    round6) round5_extended matchopt-ens-mix-near candidates-r6 ;;
    round6-hopper) later_round_hopper matchopt-ens-mix-near candidates-r6 ;;
    round7) round7 matchopt-ens-mix-near-avg ;;
    round7-second) round7_second matchopt-ens-mix-near-avg ;;
    # Round 8: `auto` again on round 5's cells, its protocol now a bounded share of the
    # held-out top designs and its split grouped by design.
    round8) round5_extended auto candidates-r8 ;;
    round8-hopper) later_round_hopper auto candidates-r8 ;;
    pool) pool ;;
    landscapes) landscapes ;;
    round9) enlarged_suite_round matchopt-ens-mix-near-k1 candidates-r9 ;;
    # Round 10: the midpoint rule on one interval, one gradient per segment between its designs.
    round10) round10 matchopt-ens-mix-near-mid ;;
    # Round 11: the trapezoid rule on two intervals, gradients at the designs and between them.
    round11) round11 matchopt-ens-mix-near-k2 ;;
    # Round 12: each member trained for 800 steps at ten times the learning rate.
    round12) round12 matchopt-ens-mix-near-short ;;
    both)
        { candidates && hopper_candidates; } > "$LOG_DIR/dev-candidates.log" 2>&1 &
        first=$!
        baselines > "$LOG_DIR/dev-baselines.log" 2>&1 || status=$?
        wait "$first" || status=$?
        [ "${status:-0}" -eq 0 ] || { echo "a lane failed: see $LOG_DIR/dev-*.log" >&2; exit 1; }
        ;;
    *)
        echo "LANE must be candidates, hopper-candidates, baselines, round3, round3-hopper," \
            "round4, round4-hopper, extended-replicates, extended-utr, round5, round5-hopper, pool," \
            "round6, round6-hopper, round7, round7-second, round8, round8-hopper, landscapes, round9," \
            "round10, round11, round12 or both, not $LANE" >&2
        exit 2
        ;;
esac

if [[ "$LANE" == round8* ]]; then
    # Round 8 reruns round 5's method under its name: $OUT now holds two records of each
    # (task, auto, seed), which a report (and benchmarks/auto_pick.py) refuses to mix.
    echo "round 8's records are in $OUT/candidates-r8*; report on a folder that holds them" \
        "and not round 5's ($OUT/candidates-r5*)" >&2
    exit 0
fi

# The README's table and figures (results/dev-figures) come from benchmarks/readme_suite_table.py;
# this whole report keeps its figures apart.
$MATCHOPT report "$OUT" --methods "matchopt-ens-mix-near,matchopt-ens-mix-near-avg,auto,matchopt-ens-mix,$COMPARED_BASELINES" \
    --plots "$OUT-report-figures" > "$OUT-report.md"
echo "report: $OUT-report.md, figures in $OUT-report-figures"
