#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine:
#   - libonnx-testdata: ONNX's own backend node tests, run by conformance/
#   - libopenblas-dev: so the `-tags openblas` build of ops/blas is tested too
#   - chromium: loads the attention-map page (index.html) headless in cmd/attnrun's tests
#   - graphviz: `dot` parses and renders `attnrun inspect --dot` in cmd/attnrun's tests
# Go modules come from the module proxy through go.sum; nothing else is needed.
set -euo pipefail
need=()
[ -d /usr/share/libonnx-testdata/data/node ] || need+=(libonnx-testdata)
[ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ] || [ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || need+=(libopenblas-dev)
command -v chromium >/dev/null || need+=(chromium)
command -v dot >/dev/null || need+=(graphviz)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}"
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
