#!/usr/bin/env bash
# Flake hunt: runs test files side by side (one pytest each, all at once, as loaded as the
# parallel pass or more), N rounds, with no retry plugin, and prints which file failed in which
# round. Exits 1 if any run failed, collected nothing (pytest's 5) or errored.
#   N=5 scripts/flake_hunt.sh [test files...]   (make flake-hunt N=5 FILES="...")
# MARKS="not serial" passes a -m expression; the logs stay in the folder printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${N:-3}
files=("$@")
if [ ${#files[@]} -eq 0 ]; then  # the parallel pass's heaviest files
  files=(tests/local/run/test_run_e2e.py tests/integration/test_workers.py tests/local/profile/test_profile.py)
fi
select=()
[ -n "${MARKS:-}" ] && select=(-m "$MARKS")
logs=$(mktemp -d "${TMPDIR:-/tmp}/flake-hunt.XXXXXX")
declare -A cell

label() {  # pytest's exit status -> what the table shows
  case $1 in
    0) echo pass ;;
    1) echo FAIL ;;
    5) echo EMPTY ;;  # nothing collected: a wrong path or -m, never a pass
    *) echo "ERROR($1)" ;;
  esac
}

failed=0
for round in $(seq 1 "$rounds"); do
  pids=()
  began=$SECONDS
  for i in "${!files[@]}"; do
    # -n 0: the files are the parallelism here; -p no:...: a retry would hide the flake
    .venv/bin/python -m pytest -n 0 -p no:rerunfailures -p no:flaky -p no:cacheprovider \
      "${select[@]}" "${files[$i]}" > "$logs/round$round-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!files[@]}"; do
    wait "${pids[$i]}"
    status=$?
    [ "$status" -eq 0 ] || failed=1
    cell[$round,$i]=$(label "$status")
  done
  echo "round $round: $((SECONDS - began)) s" >&2
done

printf '%-45s' file
for round in $(seq 1 "$rounds"); do printf ' %-9s' "round $round"; done
echo
for i in "${!files[@]}"; do
  printf '%-45s' "${files[$i]}"
  for round in $(seq 1 "$rounds"); do printf ' %-9s' "${cell[$round,$i]}"; done
  echo
done
echo "logs: $logs (round<R>-<file index>.log)"
exit "$failed"
