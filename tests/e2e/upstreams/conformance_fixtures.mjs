// The conformance suite's server fixtures as a plain MCP server on the
// official TypeScript SDK (`@modelcontextprotocol/server`, pinned in
// package.json beside this file): an upstream for the gateway's conformance
// runs (the gateway in front of it must pass what examples' own conformance
// server passes).
//
// It serves:
//   - every fixture the 2026-07-28 requirement set calls (content tools,
//     progress, errors, logging, the MRTR tools and prompt, resources,
//     templates, completion) and the 2025-11-25 suite's (sampling,
//     elicitation, enum forms, logging, subscriptions);
//   - the Tasks-extension fixtures (greet, slow_compute, failing_job, ...)
//     as PLAIN tools: this server makes no tasks, the gateway does. A
//     question is an MRTR `InputRequiredResult` (several at once where the
//     fixture asks several); a tool error is `isError: true`, a protocol
//     error a thrown JSON-RPC error.
//
// The task policies examples' conformance server gives the same fixtures
// (for the gateway's --task-policy): required: failing_job, short_lived,
// confirm_delete, run_job, multi_input, test_tool_with_task (which asks
// before its task exists); optional: slow_compute, protocol_error_job,
// test_sampling, test_elicitation, test_elicitation_sep1034_defaults;
// forbidden: greet and every other tool here.
//
//   node conformance_fixtures.mjs               stdio
//   node conformance_fixtures.mjs --http PORT   Streamable HTTP on
//                                               http://127.0.0.1:PORT/mcp
//
// `requestState` is HMAC-signed with MCP_FIXTURES_STATE_KEY (at least 32
// bytes; a fixed test key when unset, so that a restarted process still
// accepts the state its predecessor minted).
//
// Needs Node 22 (.ci/legacy-clients.sh --node); .ci/upstreams.sh installs
// the SDK and prints the command line (`.ci/upstreams.sh fixtures`).

import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { pathToFileURL } from 'node:url';

// The SDK is installed by .ci/upstreams.sh into .ci/.tools/upstreams (or
// wherever MCP_FIXTURES_NODE_MODULES names a node_modules directory), not
// beside this file, so it is loaded from there by its package.json exports.
async function load(pkg, subpath = '.') {
  const dir = process.env.MCP_FIXTURES_NODE_MODULES
    ? pathToFileURL(`${process.env.MCP_FIXTURES_NODE_MODULES}/`)
    : new URL('../../../.ci/.tools/upstreams/node_modules/', import.meta.url);
  const root = new URL(`${pkg}/`, dir);
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(new URL('package.json', root), 'utf8'));
  } catch {
    // Not there: resolve it from this file's place (a node_modules above it).
    return import(subpath === '.' ? pkg : `${pkg}/${subpath.slice(2)}`);
  }
  const entry = manifest.exports[subpath].import;
  return import(new URL(typeof entry === 'string' ? entry : entry.default, root).href);
}

const {
  Server,
  ProtocolError,
  MissingRequiredClientCapabilityError,
  ResourceNotFoundError,
  WebStandardStreamableHTTPServerTransport,
  createMcpHandler,
  createRequestStateCodec,
  isLegacyRequest,
  hostHeaderValidationResponse,
  originValidationResponse,
  localhostAllowedHostnames,
  localhostAllowedOrigins,
  inputRequired,
  inputResponse,
} = await load('@modelcontextprotocol/server');
const { serveStdio } = await load('@modelcontextprotocol/server', './stdio');

const NAME = 'mcp-tasks-conformance-fixtures';
const VERSION = '0.1.0';

/** A 1×1 PNG. */
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
/** A tiny WAV (44-byte header, no samples). */
const WAV = 'UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=';

const INVALID_PARAMS = -32602;
const INTERNAL_ERROR = -32603;

const codec = createRequestStateCodec({
  key:
    process.env.MCP_FIXTURES_STATE_KEY ??
    'mcp-tasks conformance fixtures: requestState test key',
  ttlSeconds: 3600,
});

// ---- small helpers ----------------------------------------------------------

const text = (t) => ({ content: [{ type: 'text', text: t }] });
const toolError = (t) => ({ isError: true, content: [{ type: 'text', text: t }] });

/** Waits `ms`, or throws when `signal` aborts (the call was cancelled). */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason ?? new Error('cancelled'));
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason ?? new Error('cancelled'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Seconds from an argument: finite, clamped to a day. */
function seconds(v) {
  const n = Number(v);
  return Number.isFinite(n) ? Math.min(Math.max(n, 0), 86_400) : 0;
}

/** The capabilities the client declared: on the request (2026-07-28) or at
 * `initialize` (a 2025-era session). */
function clientCapabilities(server, ctx) {
  return ctx.mcpReq.envelope?.['io.modelcontextprotocol/clientCapabilities'] ?? server.getClientCapabilities() ?? {};
}

/** Sends a progress notification when the request asked for progress. */
async function progress(ctx, value, total, message) {
  const token = ctx.mcpReq._meta?.progressToken;
  if (token === undefined) return;
  await ctx.mcpReq.notify({
    method: 'notifications/progress',
    params: { progressToken: token, progress: value, total, ...(message ? { message } : {}) },
  });
}

// ---- questions (MRTR) ---------------------------------------------------------
//
// A fixture asks with `ask(ctx, tool, questions)`: `questions` maps a key to
// `{ request, accept }`, where `request` is the embedded request and
// `accept(view)` turns an answer (the `inputResponse` view) into a value, or
// `undefined` when the answer does not fit (it is asked again). Answers
// already given ride in the signed `requestState`, so a retry need only carry
// the answers to what was asked last; `ask` returns either
// `{ answers }` (all given) or `{ result }` (the `InputRequiredResult` to
// return).

async function ask(ctx, tool, questions) {
  const state = ctx.mcpReq.requestState();
  const answers = { ...(state && state.tool === tool ? state.answers : {}) };
  const responses = ctx.mcpReq.inputResponses;
  const missing = {};
  for (const [key, q] of Object.entries(questions)) {
    if (key in answers) continue;
    const view = inputResponse(responses, key);
    const value = view.kind === 'missing' ? undefined : q.accept(view);
    if (value === undefined) missing[key] = q.request;
    else answers[key] = value;
  }
  if (Object.keys(missing).length === 0) return { answers };
  const requestState = await codec.mint({ tool, answers, round: Object.keys(answers).length });
  return { result: inputRequired({ inputRequests: missing, requestState }) };
}

/** A form question; its answer is `{action, content}` (`content` only when
 * accepted, checked by `fits`). */
function form(message, requestedSchema, fits = () => true) {
  return {
    request: { method: 'elicitation/create', params: { mode: 'form', message, requestedSchema } },
    accept: (view) => {
      if (view.kind !== 'elicit') return undefined;
      if (view.action !== 'accept') return { action: view.action };
      const content = view.content ?? {};
      return fits(content) ? { action: 'accept', content } : undefined;
    },
  };
}

const isString = (v) => typeof v === 'string';
const isBool = (v) => typeof v === 'boolean';

function sampling(params) {
  return {
    request: { method: 'sampling/createMessage', params },
    accept: (view) => (view.kind === 'sampling' ? view.result : undefined),
  };
}

const rootsQuestion = {
  request: { method: 'roots/list' },
  accept: (view) => (view.kind === 'roots' ? view.roots : undefined),
};

/** The text of a sampling answer (`content` is one block, or several). */
function samplingText(result) {
  const c = result?.content;
  const block = Array.isArray(c) ? c[0] : c;
  return typeof block?.text === 'string' ? block.text : '(no text)';
}

const capitalQuestion = () =>
  sampling({
    messages: [{ role: 'user', content: { type: 'text', text: 'What is the capital of France?' } }],
    maxTokens: 100,
  });

const userNameSchema = {
  type: 'object',
  properties: { name: { type: 'string', description: 'Your name.' } },
  required: ['name'],
};
const userName = (message = 'What is your name?') =>
  form(message, userNameSchema, (c) => isString(c.name));

const okSchema = {
  type: 'object',
  properties: { ok: { type: 'boolean', description: 'Confirmed?' } },
  required: ['ok'],
};

/** The answer to a form that had to be accepted, or the tool error to return. */
function accepted(answer, what) {
  if (answer.action === 'accept') return { content: answer.content };
  return { error: toolError(`${what}: the user chose ${answer.action}`) };
}

/** How the user answered a form (2025-11-25 suite wording). */
function userResponse(answer) {
  const content = answer.action === 'accept' ? JSON.stringify(answer.content) : 'null';
  return `action=${answer.action}, content=${content}`;
}

// ---- tools ------------------------------------------------------------------

const noArgs = { type: 'object', properties: {} };
const strictNoArgs = { type: 'object', additionalProperties: false };
const schema2020 = 'https://json-schema.org/draft/2020-12/schema';
const args = (properties, required = Object.keys(properties)) => ({
  $schema: schema2020,
  type: 'object',
  properties,
  required,
  additionalProperties: false,
});

/** Each tool: its listing and its handler `(args, ctx, server) => result`. */
const TOOLS = [];
function tool(name, description, inputSchema, handler, extra = {}) {
  TOOLS.push({ def: { name, description, inputSchema, ...extra }, handler });
}

// Content. The first tool is the one header-validation probes call with `{}`.
tool('test_simple_text', 'Returns a simple text response.', noArgs, () =>
  text('This is a simple text response for testing.'),
);
tool('test_image_content', 'Returns an image.', noArgs, () => ({
  content: [{ type: 'image', data: PNG, mimeType: 'image/png' }],
}));
tool('test_audio_content', 'Returns an audio clip.', noArgs, () => ({
  content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }],
}));
tool('test_embedded_resource', 'Returns an embedded resource.', noArgs, () => ({
  content: [
    {
      type: 'resource',
      resource: {
        uri: 'test://embedded-resource',
        mimeType: 'text/plain',
        text: 'This is an embedded resource content.',
      },
    },
  ],
}));
tool('test_multiple_content_types', 'Returns text, an image and a resource.', noArgs, () => ({
  content: [
    { type: 'text', text: 'Multiple content types test:' },
    { type: 'image', data: PNG, mimeType: 'image/png' },
    {
      type: 'resource',
      resource: {
        uri: 'test://mixed-content-resource',
        mimeType: 'application/json',
        text: JSON.stringify({ test: 'data', value: 123 }),
      },
    },
  ],
}));
tool('test_error_handling', 'Always returns a tool error.', noArgs, () =>
  toolError('This tool intentionally returns an error for testing'),
);
tool('test_tool_with_progress', 'Reports progress three times, then returns.', noArgs, async (_a, ctx) => {
  for (const step of [0, 50, 100]) {
    await progress(ctx, step, 100);
    await sleep(50, ctx.mcpReq.signal);
  }
  return text('Progress test completed');
});
tool('test_missing_capability', "Needs the client's sampling capability.", noArgs, (_a, ctx, server) => {
  if (!clientCapabilities(server, ctx).sampling) {
    throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { sampling: {} } });
  }
  return text('The client can sample.');
});
tool('test_streaming_elicitation', 'Answers without sending requests to the client.', noArgs, () =>
  text('No requests are sent on the response stream.'),
);
tool('test_logging_tool', 'Logs only when the request asks for a log level.', noArgs, async (_a, ctx) => {
  await ctx.mcpReq.log('info', 'The logging tool ran.', NAME);
  return text('Logging tool done.');
});
tool(
  'test_tool_with_logging',
  'Logs three messages (2025-11-25 sessions), then returns.',
  noArgs,
  async (_a, ctx) => {
    for (const m of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
      await ctx.mcpReq.log('info', m, NAME);
      await sleep(50, ctx.mcpReq.signal);
    }
    return text('Logging test completed');
  },
);

/** The five enum shapes of SEP-1330 (the last is the deprecated `enumNames`). */
const enumForms = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string',
      oneOf: [
        { const: 'value1', title: 'First Option' },
        { const: 'value2', title: 'Second Option' },
        { const: 'value3', title: 'Third Option' },
      ],
    },
    legacyEnum: {
      type: 'string',
      enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three'],
    },
    untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'value1', title: 'First Choice' },
          { const: 'value2', title: 'Second Choice' },
          { const: 'value3', title: 'Third Choice' },
        ],
      },
    },
  },
};
tool(
  'test_elicitation_sep1330_enums',
  'Asks a form with every enum shape of SEP-1330 (2025-11-25 sessions).',
  noArgs,
  async (_a, ctx) => {
    const asked = await ask(ctx, 'test_elicitation_sep1330_enums', {
      enums: form('Test enum schema improvements', enumForms),
    });
    if (asked.result) return asked.result;
    return text(`Elicitation completed: ${userResponse(asked.answers.enums)}`);
  },
);
tool(
  'test_reconnection',
  'Closes its SSE stream mid-call (2025-11-25 HTTP sessions), then answers on the stream the client resumes.',
  noArgs,
  async (_a, ctx) => {
    // Only a sessionful 2025-era HTTP transport (with an event store) can
    // close the stream; elsewhere this answers after the same pause.
    await sleep(100, ctx.mcpReq.signal);
    ctx.http?.closeSSE?.();
    await sleep(200, ctx.mcpReq.signal);
    return text('Reconnection test completed');
  },
);
tool(
  'json_schema_2020_12_tool',
  'Has a JSON Schema 2020-12 input schema with every keyword the suite checks.',
  {
    $schema: schema2020,
    type: 'object',
    $defs: {
      address: {
        $anchor: 'addressDef',
        type: 'object',
        properties: { street: { type: 'string' }, city: { type: 'string' } },
      },
    },
    properties: {
      name: { type: 'string' },
      address: { $ref: '#/$defs/address' },
      contactMethod: { type: 'string', enum: ['phone', 'email'] },
      phone: { type: 'string' },
      email: { type: 'string' },
    },
    allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
    if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
    then: { required: ['phone'] },
    else: { required: ['email'] },
    additionalProperties: false,
  },
  () => text('Schema accepted.'),
);
tool(
  'test_custom_header',
  'Echoes a value that also travels in the Mcp-Param-Value header.',
  {
    type: 'object',
    properties: { value: { type: 'string', 'x-mcp-header': 'Value' } },
    required: ['value'],
  },
  (a) => text(String(a.value ?? '')),
);

// MRTR (SEP-2322): inline calls that ask the client.
tool('test_input_required_result_elicitation', "Asks the user's name (elicitation), then greets them.", strictNoArgs, async (_a, ctx) => {
  const asked = await ask(ctx, 'test_input_required_result_elicitation', { user_name: userName() });
  if (asked.result) return asked.result;
  const got = accepted(asked.answers.user_name, 'test_input_required_result_elicitation');
  return got.error ?? text(`Hello, ${got.content.name}!`);
});
tool('test_input_required_result_sampling', "Asks the client's model a question (sampling).", strictNoArgs, async (_a, ctx) => {
  const asked = await ask(ctx, 'test_input_required_result_sampling', { capital_question: capitalQuestion() });
  if (asked.result) return asked.result;
  return text(`The model says: ${samplingText(asked.answers.capital_question)}`);
});
tool('test_input_required_result_list_roots', 'Asks the client for its roots.', strictNoArgs, async (_a, ctx) => {
  const asked = await ask(ctx, 'test_input_required_result_list_roots', { client_roots: rootsQuestion });
  if (asked.result) return asked.result;
  return text(`The client has ${asked.answers.client_roots.length} root(s)`);
});
tool(
  'test_input_required_result_request_state',
  'Asks for a confirmation; the round trip carries signed `requestState`.',
  strictNoArgs,
  async (_a, ctx) => {
    const asked = await ask(ctx, 'test_input_required_result_request_state', {
      confirm: form('Please confirm', okSchema, (c) => isBool(c.ok)),
    });
    if (asked.result) return asked.result;
    // Reaching here with an answer means the echoed state verified.
    const got = accepted(asked.answers.confirm, 'test_input_required_result_request_state');
    return got.error ?? text(`state-ok: confirmed = ${got.content.ok}`);
  },
);
tool(
  'test_input_required_result_multiple_inputs',
  'Asks three things at once: a name, a model completion and the roots.',
  strictNoArgs,
  async (_a, ctx) => {
    const asked = await ask(ctx, 'test_input_required_result_multiple_inputs', {
      user_name: userName(),
      greeting: sampling({
        messages: [{ role: 'user', content: { type: 'text', text: 'Write a one-line greeting.' } }],
        maxTokens: 50,
      }),
      client_roots: rootsQuestion,
    });
    if (asked.result) return asked.result;
    const { user_name, greeting, client_roots } = asked.answers;
    const got = accepted(user_name, 'test_input_required_result_multiple_inputs');
    if (got.error) return got.error;
    return text(`${got.content.name}: ${samplingText(greeting)}, with ${client_roots.length} root(s)`);
  },
);
tool('test_input_required_result_multi_round', 'Asks two questions in two rounds.', strictNoArgs, async (_a, ctx) => {
  const tool = 'test_input_required_result_multi_round';
  const first = await ask(ctx, tool, { step1: userName() });
  if (first.result) return first.result;
  const name = accepted(first.answers.step1, tool);
  if (name.error) return name.error;
  const second = await ask(ctx, tool, {
    step1: userName(),
    step2: form(
      `Hi ${name.content.name}, what is your favourite colour?`,
      {
        type: 'object',
        properties: { color: { type: 'string', description: 'Your favourite colour.' } },
        required: ['color'],
      },
      (c) => isString(c.color),
    ),
  });
  if (second.result) return second.result;
  const color = accepted(second.answers.step2, tool);
  return color.error ?? text(`${name.content.name} likes ${color.content.color}`);
});
tool(
  'test_input_required_result_tampered_state',
  'Asks a question whose `requestState` must come back untouched.',
  strictNoArgs,
  async (_a, ctx) => {
    const asked = await ask(ctx, 'test_input_required_result_tampered_state', {
      confirm: form('Please confirm', okSchema, (c) => isBool(c.ok)),
    });
    if (asked.result) return asked.result;
    const got = accepted(asked.answers.confirm, 'test_input_required_result_tampered_state');
    return got.error ?? text(`confirmed = ${got.content.ok}`);
  },
);
tool(
  'test_input_required_result_capabilities',
  'Asks only what the client declared it can answer: a form when it declared\nelicitation, a model completion otherwise.',
  strictNoArgs,
  async (_a, ctx, server) => {
    const tool = 'test_input_required_result_capabilities';
    const caps = clientCapabilities(server, ctx);
    if (caps.elicitation) {
      const asked = await ask(ctx, tool, { user_name: userName() });
      if (asked.result) return asked.result;
      const got = accepted(asked.answers.user_name, tool);
      return got.error ?? text(`Hello, ${got.content.name}!`);
    }
    if (!caps.sampling) {
      throw new MissingRequiredClientCapabilityError({
        requiredCapabilities: { sampling: {} },
      });
    }
    const asked = await ask(ctx, tool, { capital_question: capitalQuestion() });
    if (asked.result) return asked.result;
    return text(`The model says: ${samplingText(asked.answers.capital_question)}`);
  },
);

// Questions of the 2025-11-25 suite: a 2026-07-28 client answers them through
// `inputRequests`; the SDK asks a 2025-era session client in its session.
tool(
  'test_sampling',
  "Sends the prompt to the client's model (sampling) and reports its answer.",
  args({ prompt: { type: 'string', description: 'The prompt to send.' } }),
  async (a, ctx) => {
    const asked = await ask(ctx, 'test_sampling', {
      llm: sampling({
        messages: [{ role: 'user', content: { type: 'text', text: String(a.prompt ?? '') } }],
        maxTokens: 100,
      }),
    });
    if (asked.result) return asked.result;
    return text(`LLM response: ${samplingText(asked.answers.llm)}`);
  },
);
tool(
  'test_elicitation',
  'Asks the user for a name and an email address (elicitation).',
  args({ message: { type: 'string', description: 'The message to show the user.' } }),
  async (a, ctx) => {
    const asked = await ask(ctx, 'test_elicitation', {
      user_info: form(
        String(a.message ?? ''),
        {
          type: 'object',
          properties: {
            username: { type: 'string', description: "User's response" },
            email: { type: 'string', description: "User's email address" },
          },
          required: ['username', 'email'],
        },
        (c) => isString(c.username) && isString(c.email),
      ),
    });
    if (asked.result) return asked.result;
    return text(`User response: ${userResponse(asked.answers.user_info)}`);
  },
);
tool(
  'test_elicitation_sep1034_defaults',
  'Asks a form whose fields all have defaults (SEP-1034).',
  strictNoArgs,
  async (_a, ctx) => {
    const asked = await ask(ctx, 'test_elicitation_sep1034_defaults', {
      defaults: form('Please provide values (all have defaults)', {
        type: 'object',
        properties: {
          name: { type: 'string', description: "User's name", default: 'John Doe' },
          age: { type: 'integer', description: "User's age", default: 30 },
          score: { type: 'number', description: "User's score", default: 95.5 },
          status: {
            type: 'string',
            description: "User's status",
            enum: ['active', 'inactive', 'pending'],
            default: 'active',
          },
          verified: { type: 'boolean', description: 'Whether the user is verified', default: true },
        },
      }),
    });
    if (asked.result) return asked.result;
    const answer = asked.answers.defaults;
    if (answer.action === 'accept') {
      // A field left out takes its default.
      answer.content = {
        name: 'John Doe',
        age: 30,
        score: 95.5,
        status: 'active',
        verified: true,
        ...answer.content,
      };
    }
    return text(`Elicitation completed: ${userResponse(answer)}`);
  },
);

// ---- Tasks-extension fixtures, as plain tools ---------------------------------
//
// The gateway runs these as durable tasks (its --task-policy says which).

tool(
  'greet',
  'Greets someone by name. Always answers synchronously.',
  args({ name: { type: 'string', description: 'Who to greet.' } }),
  (a) => text(`Hello, ${a.name}!`),
  { annotations: { readOnlyHint: true } },
);
tool(
  'slow_compute',
  'Waits `seconds`, then reports. Runs as a task when the client can take one;\nhonours cancellation.',
  args({
    seconds: { type: 'number', description: 'How long to take, in seconds.' },
    label: { type: 'string', description: 'A label echoed in the result.' },
  }),
  async (a, ctx) => {
    await sleep(seconds(a.seconds) * 1000, ctx.mcpReq.signal);
    return text(`slow_compute(${a.label}) done after ${a.seconds}s`);
  },
);
tool(
  'failing_job',
  'Works for about a second, then reports a tool error (`isError: true`). Only\nruns as a task.',
  strictNoArgs,
  async (_a, ctx) => {
    await sleep(1000, ctx.mcpReq.signal);
    return toolError('failing_job: intentional tool execution error');
  },
);
tool(
  'protocol_error_job',
  'Works briefly, then fails with a JSON-RPC error (the task ends `failed`).',
  strictNoArgs,
  async (_a, ctx) => {
    await sleep(200, ctx.mcpReq.signal);
    throw new ProtocolError(INTERNAL_ERROR, 'protocol_error_job: intentional protocol-level failure');
  },
);
tool(
  'short_lived',
  'Works for ten seconds but is kept for one only: a task that expires while it\nruns, for clients\' tests of expiry.',
  strictNoArgs,
  async (_a, ctx) => {
    await sleep(10_000, ctx.mcpReq.signal);
    return text('short_lived: outlived its ttl');
  },
);
tool(
  'confirm_delete',
  'Asks for confirmation, then (pretends to) delete a file.',
  args({ filename: { type: 'string', description: 'The file to delete.' } }),
  async (a, ctx) => {
    const asked = await ask(ctx, 'confirm_delete', {
      confirm: form(
        `Delete ${a.filename}?`,
        {
          type: 'object',
          properties: { confirm: { type: 'boolean', description: 'Delete it?' } },
          required: ['confirm'],
        },
        (c) => isBool(c.confirm),
      ),
    });
    if (asked.result) return asked.result;
    const got = accepted(asked.answers.confirm, `confirm_delete(${a.filename})`);
    return got.error ?? text(`confirm_delete(${a.filename}): confirmed = ${got.content.confirm}`);
  },
  { annotations: { destructiveHint: true } },
);
const REGIONS = { 'eu-west': 'Europe (west)', 'us-east': 'US (east)', 'ap-south': 'Asia Pacific (south)' };
tool(
  'run_job',
  'Asks how to run a job (start it?, a region, 1 to 8 workers), then runs it\nfor `seconds`, saying what it does in its progress messages.',
  args({
    name: { type: 'string', description: "The job's name." },
    seconds: { type: 'number', description: 'How long the job runs once started, in seconds.' },
  }),
  async (a, ctx) => {
    await progress(ctx, 0, undefined, `preparing ${a.name}`);
    const asked = await ask(ctx, 'run_job', {
      settings: form(
        `How should ${a.name} run?`,
        {
          type: 'object',
          properties: {
            start: { type: 'boolean', description: 'Start the job now?' },
            region: {
              type: 'string',
              description: 'Region to run in',
              oneOf: Object.entries(REGIONS).map(([k, title]) => ({ const: k, title })),
            },
            workers: { type: 'integer', description: 'Number of workers', minimum: 1, maximum: 8 },
          },
          required: ['start', 'region', 'workers'],
        },
        (c) =>
          isBool(c.start) &&
          c.region in REGIONS &&
          Number.isInteger(c.workers) &&
          c.workers >= 1 &&
          c.workers <= 8,
      ),
    });
    if (asked.result) return asked.result;
    const got = accepted(asked.answers.settings, `run_job(${a.name})`);
    if (got.error) return got.error;
    const { start, region, workers } = got.content;
    if (!start) return toolError(`run_job(${a.name}): not started`);
    await progress(ctx, 1, undefined, `running ${a.name} on ${workers} workers in ${region}`);
    await sleep(seconds(a.seconds) * 1000, ctx.mcpReq.signal);
    return text(`run_job(${a.name}): ${workers} workers in ${region}, done`);
  },
);
/** One value typed by the user: the suite answers `multi_input` with
 * `{name, confirm}`, so `name` stands in for `value`. */
const inputForm = (message) =>
  form(
    message,
    {
      type: 'object',
      properties: {
        value: { type: 'string', description: 'The value.' },
        name: { type: 'string', description: 'A name, in place of the value.' },
      },
    },
    (c) => (c.value === undefined || isString(c.value)) && (c.name === undefined || isString(c.name)),
  );
const inputText = (answer) => (answer.action === 'accept' ? answer.content.value ?? answer.content.name ?? '' : '');
tool('multi_input', 'Asks two questions at once and combines the answers.', strictNoArgs, async (_a, ctx) => {
  const asked = await ask(ctx, 'multi_input', {
    'input-a': inputForm('Provide value A'),
    'input-b': inputForm('Provide value B'),
  });
  if (asked.result) return asked.result;
  const a = asked.answers['input-a'];
  const b = asked.answers['input-b'];
  for (const answer of [a, b]) {
    if (answer.action !== 'accept') return toolError(`multi_input: the user chose ${answer.action}`);
  }
  return text(`multi_input: a = ${inputText(a)}, b = ${inputText(b)}`);
});
tool(
  'test_tool_with_task',
  "Asks the user's name first (MRTR), then greets them after a short while.",
  strictNoArgs,
  async (_a, ctx) => {
    const asked = await ask(ctx, 'test_tool_with_task', { user_name: userName() });
    if (asked.result) return asked.result;
    const got = accepted(asked.answers.user_name, 'test_tool_with_task');
    if (got.error) return got.error;
    await sleep(200, ctx.mcpReq.signal);
    return text(`Hello, ${got.content.name}! (async)`);
  },
);

const TOOL_BY_NAME = new Map(TOOLS.map((t) => [t.def.name, t]));

// ---- prompts ----------------------------------------------------------------

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt with no arguments.' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with two arguments.',
    arguments: [
      { name: 'arg1', description: 'First', required: true },
      { name: 'arg2', description: 'Second', required: true },
    ],
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt embedding a resource.',
    arguments: [{ name: 'resourceUri', description: 'The resource', required: true }],
  },
  { name: 'test_prompt_with_image', description: 'A prompt with an image.' },
  { name: 'test_input_required_result_prompt', description: 'A prompt that asks the user first.' },
];

async function getPrompt(params, ctx) {
  const arg = (n) => String(params.arguments?.[n] ?? '');
  const user = (content) => ({ role: 'user', content });
  switch (params.name) {
    case 'test_simple_prompt':
      return { messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] };
    case 'test_prompt_with_arguments':
      return {
        messages: [
          user({ type: 'text', text: `Prompt with arguments: arg1='${arg('arg1')}', arg2='${arg('arg2')}'` }),
        ],
      };
    case 'test_prompt_with_embedded_resource':
      return {
        messages: [
          user({
            type: 'resource',
            resource: { uri: arg('resourceUri'), mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
          }),
          user({ type: 'text', text: 'Please process the embedded resource above.' }),
        ],
      };
    case 'test_prompt_with_image':
      return {
        messages: [
          user({ type: 'image', data: PNG, mimeType: 'image/png' }),
          user({ type: 'text', text: 'Please analyze the image above.' }),
        ],
      };
    case 'test_input_required_result_prompt': {
      const asked = await ask(ctx, 'test_input_required_result_prompt', {
        user_context: form(
          'What context should the prompt use?',
          { type: 'object', properties: { context: { type: 'string' } }, required: ['context'] },
          (c) => isString(c.context),
        ),
      });
      if (asked.result) return asked.result;
      const answer = asked.answers.user_context;
      const context = answer.action === 'accept' ? answer.content.context : 'none';
      return { messages: [user({ type: 'text', text: `Use this context: ${context}` })] };
    }
    default:
      throw new ProtocolError(INVALID_PARAMS, `unknown prompt \`${params.name}\``);
  }
}

// ---- resources --------------------------------------------------------------

const RESOURCES = [
  { uri: 'test://static-text', name: 'static-text', description: 'A static text resource', mimeType: 'text/plain' },
  { uri: 'test://static-binary', name: 'static-binary', description: 'A static binary resource', mimeType: 'image/png' },
];
const TEMPLATES = [
  {
    uriTemplate: 'test://template/{id}/data',
    name: 'template-data',
    description: 'Data by id',
    mimeType: 'application/json',
  },
];

function readResource(uri) {
  if (uri === 'test://static-text') {
    return [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }];
  }
  if (uri === 'test://static-binary') return [{ uri, mimeType: 'image/png', blob: PNG }];
  const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
  if (m) {
    const id = m[1];
    return [
      {
        uri,
        mimeType: 'application/json',
        text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
      },
    ];
  }
  throw new ResourceNotFoundError(uri, `resource not found: ${uri}`);
}

// ---- the server -------------------------------------------------------------

/** One server instance: per HTTP request, or per stdio connection. */
function makeServer() {
  const server = new Server(
    { name: NAME, version: VERSION },
    {
      capabilities: {
        tools: {},
        prompts: {},
        resources: { subscribe: true },
        completions: {},
        logging: {},
      },
      instructions: 'mcp-tasks conformance fixtures (TypeScript SDK upstream)',
      requestState: { verify: codec.verify },
    },
  );
  server.setRequestHandler('tools/list', () => ({ tools: TOOLS.map((t) => t.def) }));
  server.setRequestHandler('tools/call', async (request, ctx) => {
    const { name, arguments: a = {} } = request.params;
    const t = TOOL_BY_NAME.get(name);
    if (!t) throw new ProtocolError(INVALID_PARAMS, `unknown tool \`${name}\``);
    return t.handler(a ?? {}, ctx, server);
  });
  server.setRequestHandler('prompts/list', () => ({ prompts: PROMPTS }));
  server.setRequestHandler('prompts/get', (request, ctx) => getPrompt(request.params, ctx));
  server.setRequestHandler('resources/list', () => ({ resources: RESOURCES }));
  server.setRequestHandler('resources/templates/list', () => ({ resourceTemplates: TEMPLATES }));
  server.setRequestHandler('resources/read', (request) => ({ contents: readResource(request.params.uri) }));
  // Any URI may be watched; none ever changes (2025-era sessions only).
  server.setRequestHandler('resources/subscribe', () => ({}));
  server.setRequestHandler('resources/unsubscribe', () => ({}));
  server.setRequestHandler('completion/complete', (request) => {
    const prefix = String(request.params.argument?.value ?? '');
    const values = ['test', 'testing', 'tested'].filter((v) => v.startsWith(prefix));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

// ---- transports -------------------------------------------------------------

function onError(error) {
  process.stderr.write(`${NAME}: ${error?.stack ?? error}\n`);
}

/** The value an `Mcp-Param-*` header carries: literal, or `=?base64?…?=`
 * (strict Base64: its alphabet, and padding to a multiple of four).
 * `undefined` when the Base64 is malformed. */
function headerValue(raw) {
  const m = /^=\?base64\?(.*)\?=$/.exec(raw);
  if (!m) return raw;
  const b64 = m[1];
  if (b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) return undefined;
  return Buffer.from(b64, 'base64').toString('utf8');
}

/** SEP-2243: a 2026-07-28 `tools/call` whose tool marks arguments with
 * `x-mcp-header` must carry each such argument in its `Mcp-Param-{Name}`
 * header, equal to the body's value. Returns the 400 answer, or undefined. */
function customHeaderRejection(request, body) {
  if (request.headers.get('mcp-protocol-version') !== '2026-07-28') return undefined;
  if (body?.method !== 'tools/call') return undefined;
  const def = TOOL_BY_NAME.get(body.params?.name)?.def;
  const args = body.params?.arguments ?? {};
  for (const [param, schema] of Object.entries(def?.inputSchema?.properties ?? {})) {
    const name = schema?.['x-mcp-header'];
    if (!name || !(param in args) || args[param] === null || typeof args[param] === 'object') continue;
    const raw = request.headers.get(`mcp-param-${name}`);
    let problem;
    if (raw === null) problem = `missing header Mcp-Param-${name}`;
    else {
      const value = headerValue(raw);
      if (value === undefined) problem = `header Mcp-Param-${name} has malformed Base64`;
      else if (value !== String(args[param])) problem = `header Mcp-Param-${name} does not match argument \`${param}\``;
    }
    if (problem) {
      return Response.json(
        { jsonrpc: '2.0', id: body.id ?? null, error: { code: -32020, message: `Header mismatch: ${problem}` } },
        { status: 400 },
      );
    }
  }
  return undefined;
}

/** The SSE events of one HTTP session, so that a client reconnecting with
 * `Last-Event-ID` gets what it missed on that stream (SEP-1699). */
function memoryEventStore() {
  const events = []; // [eventId, streamId, message], in order
  let next = 0;
  return {
    async storeEvent(streamId, message) {
      const id = `${streamId}_${++next}`;
      events.push([id, streamId, message]);
      return id;
    },
    async getStreamIdForEventId(eventId) {
      return events.find(([id]) => id === eventId)?.[1];
    },
    async replayEventsAfter(lastEventId, { send }) {
      const at = events.findIndex(([id]) => id === lastEventId);
      if (at < 0) return '';
      const streamId = events[at][1];
      for (const [id, sid, message] of events.slice(at + 1)) {
        if (sid === streamId) await send(id, message);
      }
      return streamId;
    },
  };
}

/** 2025-era clients over HTTP: one session (a server instance and its
 * transport) per `initialize`, kept until the client deletes it, so the
 * SDK's legacy shim can ask a session's client (sampling, elicitation) in
 * the middle of a call. */
function legacySessions() {
  const sessions = new Map();
  const jsonError = (status, code, message) =>
    Response.json({ jsonrpc: '2.0', id: null, error: { code, message } }, { status });
  return async (request, body) => {
    const id = request.headers.get('mcp-session-id');
    if (id) {
      const transport = sessions.get(id);
      if (!transport) return jsonError(404, -32001, 'Session not found');
      return transport.handleRequest(request, { parsedBody: body });
    }
    if (request.method !== 'POST' || body?.method !== 'initialize') {
      return jsonError(400, -32000, 'Bad Request: no valid session id provided');
    }
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: memoryEventStore(),
      retryInterval: 500,
      onsessioninitialized: (sid) => {
        sessions.set(sid, transport);
      },
      onsessionclosed: (sid) => {
        sessions.delete(sid);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await makeServer().connect(transport);
    return transport.handleRequest(request, { parsedBody: body });
  };
}

/** Serves the fetch-shaped MCP handler on node:http at 127.0.0.1:port/mcp,
 * refusing requests whose Host or Origin is not local (DNS rebinding). */
function serveHttp(port) {
  // 2026-07-28 requests: a server instance per request. Others: sessions.
  const handler = createMcpHandler(() => makeServer(), { onerror: onError, legacy: 'reject' });
  const legacy = legacySessions();
  const httpServer = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', `http://${req.headers.host ?? `127.0.0.1:${port}`}`);
    if (url.pathname !== '/mcp') {
      res.writeHead(404).end('Not Found');
      return;
    }
    const abort = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abort.abort(new Error('the client went away'));
    });
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) for (const one of v) headers.append(k, one);
      else if (v !== undefined) headers.set(k, v);
    }
    try {
      const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
      // The body is read here to check SEP-2243 headers against it.
      const raw = hasBody ? Buffer.concat(await Array.fromAsync(req)) : undefined;
      let body;
      try {
        body = raw ? JSON.parse(raw.toString('utf8')) : undefined;
      } catch {
        body = undefined; // the SDK answers a body that is not JSON
      }
      const request = new Request(url, { method: req.method, headers, body: raw, signal: abort.signal });
      const response =
        hostHeaderValidationResponse(request, localhostAllowedHostnames()) ??
        originValidationResponse(request, localhostAllowedOrigins()) ??
        customHeaderRejection(request, body) ??
        ((await isLegacyRequest(request, body)) ? await legacy(request, body) : await handler.fetch(request));
      const out = {};
      response.headers.forEach((value, key) => {
        out[key] = key in out ? `${out[key]}, ${value}` : value;
      });
      res.writeHead(response.status, out);
      if (!response.body) {
        res.end();
        return;
      }
      for await (const chunk of response.body) {
        if (!res.write(chunk)) await new Promise((r) => res.once('drain', r));
      }
      res.end();
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end('Internal Server Error');
      else res.destroy();
      if (!abort.signal.aborted) onError(error);
    }
  });
  httpServer.listen(port, '127.0.0.1', () => {
    process.stderr.write(`${NAME}: listening on http://127.0.0.1:${port}/mcp\n`);
  });
  const stop = () => {
    handler.close().finally(() => process.exit(0));
    httpServer.close();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

const argv = process.argv.slice(2);
const httpAt = argv.indexOf('--http');
if (httpAt >= 0) {
  const port = Number(argv[httpAt + 1]);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    process.stderr.write(`usage: conformance_fixtures.mjs [--http PORT]\n`);
    process.exit(2);
  }
  serveHttp(port);
} else {
  serveStdio(() => makeServer(), { onerror: onError });
}
