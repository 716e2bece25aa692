#!/usr/bin/env bash
# Install Mooncake's transfer engine for the tests that run it on CPU: each pinned non-CUDA wheel
# of requirements-mooncake.txt into .tools/mooncake/<version> (pip --target, no dependencies: it
# needs aiohttp, requests and msgpack, which the e2e venv holds; run it with that venv's Python
# and PYTHONPATH=.tools/mooncake/<version>), and Debian's libibverbs1 with the libnl libraries it
# links, unpacked into .tools/mooncake/lib (LD_LIBRARY_PATH): the wheel's engine.so links
# libibverbs.so.1 whether or not an RDMA device exists; finding none, the engine installs its TCP
# transport. The .debs come from apt-get download (no root needed) and are checked against the
# hashes below.
# A missing prerequisite ends it with one line naming what is missing; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.tools/mooncake
python="${E2E_PYTHON:-/usr/bin/python3.11}"
die() { echo "install-mooncake: $*" >&2; exit 1; }
# Debian 12 (bookworm) amd64: libibverbs1 44.0-2 and what it depends on for its shared objects.
DEBS=(
  "libibverbs1=44.0-2 35054815259fee46173240254246d03b673a5cd5c528aaac96fd15ac428a8d59"
  "libnl-3-200=3.7.0-0.2+b1 d1fc3e9eb8e79b4c96b0a64c3d8c9e068ae2f665cab71bd19f417ffd0453a890"
  "libnl-route-3-200=3.7.0-0.2+b1 0fdcc425ae2982788c085c76a7cb0eda3e3db99d41bd1ce56082ee18e9f1e21f"
)

[ -x "${python}" ] || die "${python} is missing: the transfer engine's wheels are cp311 (Debian: apt-get install python3.11), or E2E_PYTHON=<path>"
"${python}" -m pip --version >/dev/null 2>&1 || die "${python} has no pip: it installs the transfer engine's wheels (Debian: apt-get install python3-pip), or E2E_PYTHON=<path>"
command -v apt-get >/dev/null || die "no apt-get: libibverbs1 comes from Debian's packages (elsewhere: install libibverbs1 and libnl-route-3-200, and remove the lib folder check)"
command -v dpkg-deb >/dev/null || die "no dpkg-deb: it unpacks the libibverbs1 package (apt-get install dpkg)"

rm -rf "${dest}"
mkdir -p "${dest}/debs" "${dest}/lib" "${dest}/unpacked"
for entry in "${DEBS[@]}"; do
  read -r package sha <<<"${entry}"
  (cd "${dest}/debs" && apt-get download "${package}" >/dev/null 2>&1) ||
    die "apt-get download ${package} failed: no network to Debian's packages, or the version is gone (apt-cache policy ${package%%=*})"
  file=$(ls "${dest}/debs/${package%%=*}_"*.deb)
  echo "${sha}  ${file}" | sha256sum --check --quiet - || die "${file}: sha256 differs from the pinned ${sha}"
  dpkg-deb -x "${file}" "${dest}/unpacked"
done
# One folder for LD_LIBRARY_PATH: the packages put their libraries in /lib and /usr/lib.
find "${dest}/unpacked" -name '*.so*' -exec cp -a {} "${dest}/lib/" \;
rm -rf "${dest}/unpacked" "${dest}/debs"

while read -r line; do
  case "${line}" in '' | '#'*) continue ;; esac
  version=$(sed -n 's/^[^=]*==\([^ ]*\) .*/\1/p' <<<"${line}")
  [ -n "${version}" ] || die "requirements-mooncake.txt: cannot read a version in '${line}'"
  echo "${line}" >"${dest}/requirement-${version}.txt"
  "${python}" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
    --target "${dest}/${version}" -r "${dest}/requirement-${version}.txt" ||
    die "pip could not install mooncake-transfer-engine-non-cuda==${version} (no network to the package index, or the disk is full)"
  rm -f "${dest}/requirement-${version}.txt"
  LD_LIBRARY_PATH="${dest}/lib" PYTHONPATH="${dest}/${version}" "${python}" -c 'from mooncake.engine import TransferEngine' ||
    die "mooncake-transfer-engine-non-cuda==${version} does not import with ${dest}/lib (see above)"
done <requirements-mooncake.txt
touch "${dest}/.installed"
echo "install-mooncake: $(ls -d "${dest}"/0.* | wc -l) transfer engine versions and libibverbs in ${dest}"
