#!/usr/bin/env bash
# Installs and builds @ronomon/reed-solomon for the erasure benchmark only.
# npm 11 no longer runs its install script, so the native addon is built explicitly.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/ronomon"
addon="$dir/node_modules/@ronomon/reed-solomon"
if [[ -f "$addon/build/Release/binding.node" || -f "$addon/binding.node" ]]; then exit 0; fi
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
gyp_args=(rebuild)
# Use the headers installed with Node instead of downloading them (no network here).
node_root="$(dirname "$(dirname "$(command -v node)")")"
[[ -f "$node_root/include/node/node.h" ]] && gyp_args+=(--nodedir="$node_root")
(cd "$addon" && "$dir/node_modules/.bin/node-gyp" "${gyp_args[@]}" --loglevel=warn)
echo "setup-ronomon: built $(ls "$addon"/build/Release/*.node)" >&2
