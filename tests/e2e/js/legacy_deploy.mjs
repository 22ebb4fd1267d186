#!/usr/bin/env node
// Drives the demo's `deploy` tool as an MCP 2025-11-25 client would: the
// official TypeScript SDK client (@modelcontextprotocol/client, version pinned
// in package.json beside this file), `initialize` + session, and an
// elicitation handler that approves the rollout.
//
//   node legacy_deploy.mjs plain http://127.0.0.1:8080/mcp
//   node legacy_deploy.mjs task  http://127.0.0.1:8080/mcp
//   node legacy_deploy.mjs task  -- cargo run --bin demo -- --stdio
//   node legacy_deploy.mjs task  http://127.0.0.1:8080/mcp --stop-after input_required
//   node legacy_deploy.mjs resume http://127.0.0.1:8080/mcp --session SESSION --task TASK
//
// Modes:
//   plain  an ordinary tools/call; the server asks its question with
//          elicitation/create inside the call and returns the result.
//   task   a SEP-1686 task-augmented tools/call (`params.task`): expects a
//          CreateTaskResult, polls tasks/get until the task is terminal
//          (calling tasks/result as soon as it reads input_required, which is
//          where that revision delivers the question), then tasks/result.
//   resume (HTTP only) a client coming back to a task it created earlier,
//          say after the server restarted: reconnects to session --session
//          (StreamableHTTPClientTransport's `sessionId` option, so no new
//          `initialize`), then follows task --task as `task` mode does.
//
// Options (after the mode): --tool NAME, --args JSON (default: deploy with
// {"service":"billing","git_ref":"v2.3.0"}), --ttl MS (task mode),
// --timeout MS (whole run, default 300000), --stop-after STATUS (task mode:
// exit 0 once the task is `created`, or once tasks/get reports STATUS, e.g.
// `input_required`, without answering anything and without closing the
// session), --session ID and --task ID (resume mode).
//
// Output: one JSON line per event on stdout, then a final line
// {"event":"result",...} (or {"event":"stopped",...} with --stop-after). Exit 0
// when the tool's result arrives and is not an error (or on the stop), 1
// otherwise, 2 on bad usage.

import { Client, StreamableHTTPClientTransport, specTypeSchemas } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const log = (event, fields = {}) => process.stdout.write(JSON.stringify({ event, ...fields }) + '\n');

function usage(message) {
  process.stderr.write(`legacy_deploy.mjs: ${message}\n` +
    'usage: legacy_deploy.mjs plain|task URL|-- COMMAND [ARGS...] [--tool NAME] [--args JSON] [--ttl MS] [--timeout MS] [--stop-after STATUS]\n' +
    '       legacy_deploy.mjs resume URL --session ID --task ID [--timeout MS]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const [mode, ...rest] = argv;
  if (!['plain', 'task', 'resume'].includes(mode)) usage('the mode must be `plain`, `task` or `resume`');
  const opts = { mode, tool: 'deploy', args: { service: 'billing', git_ref: 'v2.3.0' }, ttl: 3_600_000, timeout: 300_000 };
  const dashdash = rest.indexOf('--');
  const head = dashdash < 0 ? rest : rest.slice(0, dashdash);
  if (dashdash >= 0) opts.command = rest.slice(dashdash + 1);
  for (let i = 0; i < head.length; i++) {
    const a = head[i];
    const value = () => head[++i] ?? usage(`${a} needs a value`);
    if (a === '--tool') opts.tool = value();
    else if (a === '--args') opts.args = JSON.parse(value());
    else if (a === '--ttl') opts.ttl = Number(value());
    else if (a === '--timeout') opts.timeout = Number(value());
    else if (a === '--stop-after') opts.stopAfter = value();
    else if (a === '--session') opts.session = value();
    else if (a === '--task') opts.task = value();
    else if (/^https?:\/\//.test(a) && !opts.url) opts.url = a;
    else usage(`unexpected argument ${a}`);
  }
  if (!opts.url === !opts.command?.length) usage('give either a URL or `-- COMMAND ...`');
  if (opts.stopAfter !== undefined && mode !== 'task') usage('--stop-after is for `task` mode');
  if (mode === 'resume' && !(opts.url && opts.session && opts.task)) usage('`resume` needs a URL, --session and --task');
  if (mode !== 'resume' && (opts.session || opts.task)) usage('--session and --task are for `resume` mode');
  return opts;
}

// An answer for a form elicitation: approve every boolean, and fill the other
// fields with their defaults (or a plain value), so `deploy` rolls out.
function approve(schema = {}) {
  const content = {};
  for (const [name, prop] of Object.entries(schema.properties ?? {})) {
    if (prop.default !== undefined) content[name] = prop.type === 'boolean' ? true : prop.default;
    else if (prop.type === 'boolean') content[name] = true;
    else if (prop.type === 'integer' || prop.type === 'number') content[name] = prop.minimum ?? 1;
    else if (prop.type === 'string') content[name] = prop.enum?.[0] ?? prop.oneOf?.[0]?.const ?? 'approved by legacy_deploy.mjs';
    else if (prop.type === 'array') content[name] = [];
  }
  return content;
}

const RELATED_TASK = 'io.modelcontextprotocol/related-task';
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const timer = setTimeout(() => { log('error', { message: `timed out after ${opts.timeout} ms` }); process.exit(1); }, opts.timeout);

  const client = new Client(
    { name: 'legacy-deploy', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} } } },
  );
  client.setRequestHandler('elicitation/create', async (request) => {
    const { message, requestedSchema, _meta } = request.params;
    const content = approve(requestedSchema);
    log('elicitation', { message, relatedTask: _meta?.[RELATED_TASK]?.taskId ?? null, answer: { action: 'accept', content } });
    return { action: 'accept', content };
  });
  client.setNotificationHandler('notifications/tasks/status', (n) => {
    log('task_status_notification', { taskId: n.params.taskId, status: n.params.status, statusMessage: n.params.statusMessage });
  });

  // A session id given up front makes connect() skip `initialize`: the client
  // carries on in the session it had (the server must still know it).
  const transport = opts.url
    ? new StreamableHTTPClientTransport(new URL(opts.url),
      opts.session ? { sessionId: opts.session, protocolVersion: '2025-11-25' } : undefined)
    : new StdioClientTransport({ command: opts.command[0], args: opts.command.slice(1), stderr: 'inherit' });
  await client.connect(transport);
  const caps = client.getServerCapabilities() ?? {};
  log('connected', {
    protocolVersion: transport.protocolVersion ?? client.getNegotiatedProtocolVersion?.() ?? null,
    sessionId: transport.sessionId ?? null,
    server: client.getServerVersion() ?? null,
    tasks: caps.tasks ?? null,
  });

  if (opts.mode === 'resume') {
    const result = await followTask(client, opts.task, opts);
    return finish(client, timer, result);
  }

  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === opts.tool);
  if (!tool) throw new Error(`the server has no tool \`${opts.tool}\` (it has: ${tools.map((t) => t.name).join(', ')})`);
  log('tool', { name: tool.name, taskSupport: tool.execution?.taskSupport ?? null });

  const params = { name: opts.tool, arguments: opts.args };
  const callOptions = {
    timeout: opts.timeout,
    resetTimeoutOnProgress: true,
    onprogress: (p) => log('progress', p),
  };
  let result;
  if (opts.mode === 'plain') {
    result = await client.callTool(params, callOptions);
  } else {
    if (!caps.tasks?.requests?.tools?.call) log('warning', { message: 'the server does not declare capabilities.tasks.requests.tools.call' });
    const created = await client.request(
      { method: 'tools/call', params: { ...params, task: { ttl: opts.ttl } } },
      specTypeSchemas.CreateTaskResult,
      callOptions,
    );
    log('task_created', created.task);
    if (opts.stopAfter === 'created') stop(transport, created.task);
    result = await followTask(client, created.task.taskId, opts, transport);
  }
  return finish(client, timer, result);
}

// Follows a SEP-1686 task to its result: polls tasks/get, and calls
// tasks/result (which blocks until the task is terminal, and on which the
// server delivers the task's questions: elicitation/create with related-task
// _meta) as soon as the task reads input_required, or once it is terminal.
async function followTask(client, taskId, opts, transport) {
  let pending;
  const fetchResult = () => (pending ??= client.request(
    { method: 'tasks/result', params: { taskId } },
    specTypeSchemas.GetTaskPayloadResult,
    { timeout: opts.timeout, resetTimeoutOnProgress: true },
  ));
  let last = '';
  for (;;) {
    const task = await client.request({ method: 'tasks/get', params: { taskId } }, specTypeSchemas.GetTaskResult);
    const seen = `${task.status}\u0000${task.statusMessage ?? ''}`;
    if (seen !== last) log('task', { taskId, status: task.status, statusMessage: task.statusMessage ?? null });
    last = seen;
    if (opts.stopAfter === task.status) stop(transport, task);
    if (task.status === 'input_required') fetchResult().catch(() => {});
    if (TERMINAL.has(task.status)) break;
    await sleep(Math.min(Math.max(task.pollInterval ?? 1000, 100), 5000));
  }
  const result = await fetchResult();
  const related = result._meta?.[RELATED_TASK]?.taskId;
  if (related !== undefined && related !== taskId) throw new Error(`tasks/result names task ${related}, not ${taskId}`);
  return result;
}

// --stop-after: leave at once, the way a client that crashed or went away
// would: no close(), so the session is not ended (no DELETE) and nothing is
// answered.
function stop(transport, task) {
  log('stopped', { taskId: task.taskId, status: task.status, statusMessage: task.statusMessage ?? null, sessionId: transport.sessionId ?? null });
  process.exit(0);
}

async function finish(client, timer, result) {
  clearTimeout(timer);
  log('result', { isError: result.isError ?? false, structuredContent: result.structuredContent ?? null, content: result.content ?? null });
  await client.close();
  process.exit(result.isError ? 1 : 0);
}

main().catch((error) => {
  log('error', { message: error?.message ?? String(error), code: error?.code ?? null });
  process.exit(1);
});
