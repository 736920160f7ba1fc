#!/usr/bin/env bash
# The paper table's Superconductor column in results/main: the paper preset of the paper's
# methods, the sanity checks (random, untrained), the recommended method and `auto`, seeds 0-3,
# one thread per job. Superconductor is a confirmation task (docs/suite.md): nothing here is
# chosen on it. The only settings beside the paper preset are the reference code's own for
# Superconductor, as the methods document them: 50 training epochs for GA, Ens-Mean and Ens-Min
# (methods/gradient_ascent.py) and RoMA's inner_lr 5e-4 (methods/roma.py).
#
#   bash benchmarks/superconductor.sh                     # LANE=cpu, then the report
#   LANE=ensemble OUT=results/sc-ens bash benchmarks/superconductor.sh  # its last step only,
#                                                         # beside the cpu lane (own folder)
#   LANE=gpu bash benchmarks/superconductor.sh            # on a lent GPU machine: gpu_grid.sh
#                                                         # with TASK=superconductor (its notes)
#   LANE=gpu-bound-cpu bash benchmarks/superconductor.sh  # the same four methods on the CPU
#   LANE=report bash benchmarks/superconductor.sh
#
# Lanes:
# * cpu: the 12 methods of TF-Bind-8's CPU table (results/main/tfbind8), cheapest first, then
#   the recommended method, then the three that share one Gaussian ensemble per seed (Ens-Mean
#   trains it, Ens-Min and GA read it), then `auto` (which trains its whole pool; the costliest).
# * ensemble: those three alone, to run beside the cpu lane into another folder (a bench locks
#   its folder); copy its superconductor/ records into results/main after (cp -rn).
# * gpu: BONET, COMs, MINs and DDOM, seeds batched, on the device (benchmarks/gpu_grid.sh).
# * gpu-bound-cpu: the same four on this CPU, one thread: TF-Bind-8 took ~2.6 h (DDOM), ~10 h
#   (MINs), ~9.6 h (COMs) and ~87 h (BONET) per seed here (results/main/pending.csv).
#
# Resumable: `matchopt bench` skips finished cells and long cells keep training snapshots, so
# rerunning a lane continues where it stopped. A bench locks its results folder: one lane at a
# time per folder. Run from a `git archive` of the commit (records name the code):
#   PYTHONPATH=/tmp/archive/src bash benchmarks/superconductor.sh
# MATCHOPT="echo matchopt" GPU_GRID=echo prints the commands instead of running them.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-results/main}"
LANE="${LANE:-cpu}"
SEEDS="${SEEDS:-0,1,2,3}"
MATCHOPT="${MATCHOPT:-python -m matchopt.cli}"
GPU_GRID="${GPU_GRID:-bash benchmarks/gpu_grid.sh}"

CPU_TABLE="random,untrained,cma-es,bo-qei,bdi,cbas,roma,matchopt-noreg,matchopt"
RECOMMENDED="matchopt-ens-mix-near"  # matchopt.names.RECOMMENDED_METHOD
ENSEMBLE="ens-mean,ens-min,ga"
GPU_BOUND="ddom,coms,mins,bonet"

bench() {
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $MATCHOPT bench --tasks superconductor --seeds "$SEEDS" \
        --preset paper --out "$OUT" --threads 1 --workers 1 "$@"
}

ensemble() {
    bench --methods "$ENSEMBLE" --set superconductor:ens-mean.epochs=50 \
        --set superconductor:ens-min.epochs=50 --set superconductor:ga.epochs=50
}

cpu() {
    bench --methods "$CPU_TABLE" --set superconductor:roma.inner_lr=5e-4
    bench --methods "$RECOMMENDED"
    ensemble
    bench --methods auto
}

case "$LANE" in
    cpu) cpu ;;
    ensemble) ensemble ;;
    gpu) TASK=superconductor METHODS="$GPU_BOUND" SEEDS="$SEEDS" RESULTS="$OUT" $GPU_GRID ;;
    gpu-bound-cpu) bench --methods "$GPU_BOUND" ;;
    report) ;;
    *)
        echo "LANE must be cpu, ensemble, gpu, gpu-bound-cpu or report, not $LANE" >&2
        exit 2
        ;;
esac

$MATCHOPT report "$OUT" --tasks superconductor
