#!/usr/bin/env bash
# MCP servers nobody here wrote, for the gateway's end-to-end tests
# (tests/e2e/gateway.rs), installed from their registries at the exact
# versions pinned beside the tests:
#   - the official TypeScript "everything" server, from npm
#     (tests/e2e/upstreams/package.json), into .ci/.tools/upstreams/, run with
#     the Node 22 that .ci/legacy-clients.sh installs;
#   - the official TypeScript SDK's server package (@modelcontextprotocol/server,
#     same package.json and place), on which
#     tests/e2e/upstreams/conformance_fixtures.mjs serves the conformance
#     suite's fixtures (it loads the SDK from .ci/.tools/upstreams/);
#   - the official Python SDK (`mcp`, tests/e2e/upstreams/requirements.txt),
#     from PyPI, into the virtualenv .ci/.tools/upstreams/venv/, which runs
#     tests/e2e/upstreams/slow_server.py.
#
#   .ci/upstreams.sh --install     install (idempotent), then exit
#   .ci/upstreams.sh everything    print the everything server's command line
#                                  (node and its script, one per line)
#   .ci/upstreams.sh fixtures      print the conformance fixtures' command line
#                                  (node and its script, one per line; add
#                                  `--http PORT` to serve HTTP, not stdio)
#   .ci/upstreams.sh python        print the virtualenv's python
set -euo pipefail

CI_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$CI_DIR/.." && pwd)"
SRC="$ROOT/tests/e2e/upstreams"
TOOLS_DIR="$CI_DIR/.tools/upstreams"
EVERYTHING_JS="$TOOLS_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
FIXTURES_JS="$SRC/conformance_fixtures.mjs"
# The npm packages pinned in $SRC/package.json, each checked after install.
NPM_PACKAGES=(@modelcontextprotocol/server-everything @modelcontextprotocol/server)
VENV="$TOOLS_DIR/venv"

die() {
  echo "upstreams.sh: $*" >&2
  exit 2
}

node_bin() {
  bash "$CI_DIR/legacy-clients.sh" --node
}

# Whether npm package $1 is installed at the version package.json pins.
npm_package_ok() {
  local want have
  want="$("$(node_bin)" -p 'require(process.argv[1]).dependencies[process.argv[2]]' "$SRC/package.json" "$1")"
  have="$("$(node_bin)" -p 'require(process.argv[1]).version' \
    "$TOOLS_DIR/node_modules/$1/package.json" 2>/dev/null)" || return 1
  [[ "$want" == "$have" ]]
}

npm_ok() {
  [[ -f "$EVERYTHING_JS" ]] || return 1
  local pkg
  for pkg in "${NPM_PACKAGES[@]}"; do
    npm_package_ok "$pkg" || return 1
  done
}

python_ok() {
  [[ -x "$VENV/bin/python" ]] || return 1
  "$VENV/bin/python" - "$SRC/requirements.txt" <<'PY' >/dev/null 2>&1
import sys, importlib.metadata as m
for line in open(sys.argv[1]):
    line = line.strip()
    if line and not line.startswith("#"):
        name, version = line.split("==")
        assert m.version(name) == version, (name, m.version(name), version)
PY
}

install() {
  mkdir -p "$TOOLS_DIR"
  if ! npm_ok; then
    command -v npm >/dev/null 2>&1 || die "npm is required to install the everything server and the TypeScript SDK"
    cp "$SRC/package.json" "$TOOLS_DIR/package.json"
    echo "upstreams.sh: installing ${NPM_PACKAGES[*]} into ${TOOLS_DIR#"$ROOT"/}" >&2
    npm install --prefix "$TOOLS_DIR" --no-audit --no-fund --loglevel=error >"$TOOLS_DIR/npm.log" 2>&1 ||
      { cat "$TOOLS_DIR/npm.log" >&2; die "npm install failed"; }
    npm_ok || die "the npm packages installed but failed verification (want the versions in ${SRC#"$ROOT"/}/package.json)"
  fi
  if ! python_ok; then
    command -v python3 >/dev/null 2>&1 || die "python3 is required for the Python upstream"
    echo "upstreams.sh: installing $(tr '\n' ' ' <"$SRC/requirements.txt")into ${VENV#"$ROOT"/}" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$SRC/requirements.txt" \
      >"$TOOLS_DIR/pip.log" 2>&1 || { cat "$TOOLS_DIR/pip.log" >&2; die "pip install failed"; }
    python_ok || die "the Python SDK installed but failed verification"
  fi
}

[[ $# -ge 1 ]] || die "usage: $0 --install | everything | fixtures | python"
case "$1" in
  --install)
    install
    echo "upstreams.sh: ready: server-everything $("$(node_bin)" -p 'require(process.argv[1]).version' "$TOOLS_DIR/node_modules/@modelcontextprotocol/server-everything/package.json"), server $("$(node_bin)" -p 'require(process.argv[1]).version' "$TOOLS_DIR/node_modules/@modelcontextprotocol/server/package.json"), $("$VENV/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))')" >&2
    ;;
  everything)
    install
    node_bin
    echo "$EVERYTHING_JS"
    ;;
  fixtures)
    install
    node_bin
    echo "$FIXTURES_JS"
    ;;
  python)
    install
    echo "$VENV/bin/python"
    ;;
  *)
    die "unknown command: $1"
    ;;
esac
