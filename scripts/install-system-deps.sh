#!/usr/bin/env bash
# System packages the test suite and the layer build need beyond Python and npm packages:
#   redis-server  TLS + cluster-mode cache tests (like ElastiCache Serverless; the Valkey wheel
#                 has no TLS)
#   npm / node    the pinned CDK CLI (npm ci)
#   strip         binutils, to strip torch's shared libraries in the layer build
# Used by `make setup` and by .ci/run. Installs with apt-get as root, or `sudo -n` when that
# works without a password; otherwise stops and prints the exact command to run.
set -euo pipefail

declare -A package_of=(
  [redis-server]=redis-server
  [npm]=npm
  [node]=nodejs
  [strip]=binutils
)
missing=()
for command in "${!package_of[@]}"; do
  command -v "$command" >/dev/null 2>&1 || missing+=("${package_of[$command]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
install=(apt-get install -y -qq --no-install-recommends "${missing[@]}")
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages: ${missing[*]} (no apt-get here: install them with" \
       "your package manager)" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  run=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  run=(sudo -n)
else
  echo "error: missing system packages: ${missing[*]}. Install them, then run make again:" >&2
  echo "  sudo apt-get update && sudo ${install[*]}" >&2
  exit 1
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -qq
"${run[@]}" "${install[@]}"
