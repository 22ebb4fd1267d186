#!/usr/bin/env bash
# The simulation checked by planted bugs: each patch in .ci/planted-bugs/
# plants one bug, and the default simulation run (`cargo test -p mcp-tasks-runtime
# --test simulation generated`) must FAIL. Prints, per bug, the first
# failing seed and how many seeds failed; exits non-zero if the simulation
# missed any bug. A patch whose text before its diff has a line
# `# test: ARGS` is a bug of the wire, not of the engine: `cargo test ARGS`
# must fail instead (its first panic is printed).
#
#   .ci/planted-bugs.sh                  every planted bug
#   .ci/planted-bugs.sh 03 05            the bugs whose file names start so
#   .ci/planted-bugs.sh --rotate 3 KEY   3 of them, chosen by KEY (CI passes
#                                        the commit hash: each submission
#                                        runs another part of the set)
#
# Each bug is planted in this tree itself (`git apply`), and taken out
# again (`git apply -R`) after its run, or when the script is stopped. A
# copy of the tree elsewhere would not do: cargo names a workspace crate's
# build by its path within the workspace, so a copy building into the same
# target directory would overwrite this tree's build with the planted one,
# and cargo, seeing this tree's sources older than that build, would keep
# it. Planting here changes the sources' times, so the next build after
# the script is of the tree as it is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0

mapfile -t all < <(ls .ci/planted-bugs/*.patch)
chosen=()
if [ "${1:-}" = "--rotate" ]; then
  n=${2:?--rotate takes a count and a key}
  key=${3:?--rotate takes a count and a key}
  start=$(( 0x$(printf '%s' "$key" | sha256sum | cut -c1-6) % ${#all[@]} ))
  for ((i = 0; i < n && i < ${#all[@]}; i++)); do
    chosen+=("${all[$(((start + i) % ${#all[@]}))]}")
  done
elif [ $# -gt 0 ]; then
  for prefix in "$@"; do
    for p in "${all[@]}"; do
      case "$(basename "$p")" in "$prefix"*) chosen+=("$p") ;; esac
    done
  done
else
  chosen=("${all[@]}")
fi

out=$(mktemp "${TMPDIR:-/tmp}/planted.XXXXXX")
planted=""
unplant() {
  if [ -n "$planted" ]; then
    git apply -R "$planted"
    planted=""
  fi
}
trap 'unplant; rm -f "$out"' EXIT
trap 'exit 130' INT TERM
missed=0
for patch in "${chosen[@]}"; do
  name=$(basename "$patch" .patch)
  git apply --check "$patch"
  git apply "$patch"
  planted="$patch"
  echo "== planted bug $name"
  began=$(date +%s)
  own=$(sed -n '/^diff /q; s/^# test: //p' "$patch")
  set +e
  if [ -n "$own" ]; then
    # shellcheck disable=SC2086 # ARGS are words
    cargo test -q $own >"$out" 2>&1
  else
    cargo test -q -p mcp-tasks-runtime --test simulation generated -- --nocapture >"$out" 2>&1
  fi
  status=$?
  set -e
  unplant
  took=$(( $(date +%s) - began ))
  if [ -n "$own" ]; then
    if [ "$status" -ne 0 ] && grep -q '^test result: FAILED' "$out"; then
      echo "caught: $name: cargo test $own failed (${took} s with the build)"
      grep -m1 -A2 'panicked at' "$out" | cut -c1-300 || true
    else
      echo "MISSED: $name: cargo test $own passed (or did not run: exit $status) in ${took} s" >&2
      tail -20 "$out" >&2
      missed=$((missed + 1))
    fi
    continue
  fi
  first=$(grep -m1 -o 'first failing seed: [0-9]*' "$out" | grep -o '[0-9]*$' || true)
  count=$(grep -m1 -oE '[0-9]+ of [0-9]+ seeds failed' "$out" || true)
  if [ "$status" -ne 0 ] && [ -n "$first" ]; then
    echo "caught: $name: first failing seed $first ($count; ${took} s with the build)"
    grep -m1 "^seed $first FAILED" "$out" | cut -c1-300 || true
  else
    echo "MISSED: $name: the simulation passed (or did not run: exit $status) in ${took} s" >&2
    tail -20 "$out" >&2
    missed=$((missed + 1))
  fi
done
if [ "$missed" -gt 0 ]; then
  echo "planted bugs: $missed of ${#chosen[@]} missed by the simulation or their test" >&2
  exit 1
fi
echo "planted bugs: all ${#chosen[@]} caught"
