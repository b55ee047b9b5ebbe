#!/usr/bin/env bash
# Fetches ISA-L's source as Debian's `libisal` source package into wasm/.cache/.
#
# deb-src entries are derived from this machine's own apt sources (every `deb` entry
# becomes `deb-src`), into a private apt state under wasm/.cache/apt, so the system's
# apt configuration is left untouched and no host name lives in this repository.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=isal.lock
source "$here/isal.lock"
# Overridable so a test can check that a wrong pin is refused without touching the real cache.
cache="${ISAL_CACHE_DIR:-$here/.cache}"
ISAL_DSC_SHA256="${ISAL_DSC_SHA256_OVERRIDE:-$ISAL_DSC_SHA256}"
src_dir="$cache/isa-l-$ISAL_VERSION"
stamp="$src_dir/.verified"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$ISAL_DSC_SHA256" ]]; then
  exit 0
fi

apt_dir="$cache/apt"
rm -rf "$apt_dir" "$src_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/parts" "$cache/download"

# One-line format: `deb URI suite components` -> `deb-src URI suite components`.
: > "$apt_dir/sources.list"
if [[ -f /etc/apt/sources.list ]]; then
  sed -n 's/^[[:space:]]*deb[[:space:]]\+/deb-src /p' /etc/apt/sources.list >> "$apt_dir/sources.list"
fi
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.list; do
  sed -n 's/^[[:space:]]*deb[[:space:]]\+/deb-src /p' "$f" >> "$apt_dir/sources.list"
done
# deb822 format: `Types: deb` -> `Types: deb-src`.
for f in /etc/apt/sources.list.d/*.sources; do
  sed 's/^Types:.*$/Types: deb-src/' "$f" > "$apt_dir/parts/$(basename "$f")"
done

apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list"
  -o "Dir::Etc::SourceParts=$apt_dir/parts"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "APT::Sandbox::User=root"
)
echo "fetch-isal: updating deb-src indexes (private apt state in $apt_dir)" >&2
apt-get "${apt_opts[@]}" -qq update
echo "fetch-isal: downloading $ISAL_PACKAGE=$ISAL_VERSION source" >&2
(cd "$cache/download" && apt-get "${apt_opts[@]}" -qq --download-only source "$ISAL_PACKAGE=$ISAL_VERSION")

dsc="$cache/download/${ISAL_PACKAGE}_${ISAL_VERSION}.dsc"
orig="$cache/download/${ISAL_PACKAGE}_${ISAL_UPSTREAM}.orig.tar.xz"
if ! echo "$ISAL_DSC_SHA256  $dsc" | sha256sum --check --quiet - 2>/dev/null; then
  echo "fetch-isal: $dsc does not match the pinned SHA-256 $ISAL_DSC_SHA256 (wasm/isal.lock)" >&2
  exit 1
fi
# The tarball must match the checksum the .dsc lists for it (and our pin).
listed="$(awk '/^Checksums-Sha256:/{f=1;next} /^[^ ]/{f=0} f && $3 ~ /orig\.tar/ {print $1}' "$dsc")"
[[ "$listed" == "$ISAL_ORIG_SHA256" ]] || { echo "fetch-isal: .dsc lists $listed for the tarball, expected $ISAL_ORIG_SHA256" >&2; exit 1; }
if ! echo "$ISAL_ORIG_SHA256  $orig" | sha256sum --check --quiet - 2>/dev/null; then
  echo "fetch-isal: $orig does not match its checksum in the .dsc" >&2
  exit 1
fi

mkdir -p "$src_dir"
tar -xJf "$orig" -C "$src_dir" --strip-components=1
echo "$ISAL_DSC_SHA256" > "$stamp"
echo "fetch-isal: ISA-L $ISAL_VERSION verified and unpacked in $src_dir" >&2
