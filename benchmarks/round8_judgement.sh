#!/usr/bin/env bash
# Round 8's judgement (docs/suite-rounds.md, "Round 8"), one command from the committed records:
# the pick rate of `auto` and the suite's MNR with round 8's `auto` among the compared methods.
#
#   bash benchmarks/round8_judgement.sh              # prints both; judged once all 42 pairs are in
#   bash benchmarks/round8_judgement.sh --enlarged   # the same report on the nineteen tasks of
#                                                    # --suite dev (the landscape tasks' `auto`
#                                                    # from results/dev/landscapes), with
#                                                    # matchopt-ens-mix as in README's table
#
# The report reads records at any depth below its folder, and round 5's `auto` (results/dev's
# candidates-r5*) has the same method name as round 8's (results/round8/candidates-r8*): the
# report runs on a temporary copy of results/dev without round 5's records and with round 8's,
# removed afterwards, where records made before the lab view get theirs
# (benchmarks/lab_view.py). Nothing under results/ is written.
set -euo pipefail
cd "$(dirname "$0")/.."

MATCHOPT="${MATCHOPT:-python -m matchopt.cli}"
TASKS="tfbind8,potts,ehrlich-4x16,ehrlich-4x32,ehrlich-20x64,styblinski-tang,hartmann6"
TASKS="$TASKS,rosenbrock20,levy40,hopper-local,utr,tfbind8-replicates,potts-replicates"
METHODS="auto,matchopt-ens-mix-near,matchopt,ens-mean,ens-min,ga,bdi,cma-es,roma,random,untrained"
SCOPE=(--tasks "$TASKS")
if [ "${1:-}" = "--enlarged" ]; then
    SCOPE=(--suite dev)
    METHODS="$METHODS,matchopt-ens-mix"
fi

pairs=$(find results/round8 -path '*candidates-r8*' -name 'seed*.json' | wc -l)
echo "round 8: $pairs of 42 (task, seed) pairs recorded"

python benchmarks/auto_pick.py results/round8 --members results/dev

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r results/dev "$work/dev"
rm -rf "$work"/dev/candidates-r5*
cp -r results/round8/candidates-r8* "$work/dev/"
# Round 8's lanes run from an archive older than the lab view: the copy gets it from the designs.
python benchmarks/lab_view.py "$work"/dev/candidates-r8* >&2
$MATCHOPT report "$work/dev" --summary "${SCOPE[@]}" --methods "$METHODS"
