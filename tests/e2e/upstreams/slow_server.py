"""An upstream MCP server written with the official Python SDK (`mcp` from
PyPI, the version pinned in requirements.txt), for the gateway's end-to-end
tests (tests/e2e/gateway.rs). Nothing here knows of the gateway.

    python slow_server.py stdio
    python slow_server.py http PORT

Every call of `charge` and `report` appends a line to the file named by
SLOW_SERVER_EFFECTS (when set): `start TOOL ARG`, then `end TOOL ARG` or
`cancelled TOOL ARG`, so a test can count what ran upstream; `deploy` asks
for an approval first, and appends one line with what it was given.
"""

import os
import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ToolAnnotations
from pydantic import BaseModel

# The key that seals the `requestState` of a question (at 2026-07-28), from
# SLOW_SERVER_STATE_KEY when set: every process of the server then opens the
# state any other sealed, as a fleet of them, or one restarted, must.
_key = os.environ.get("SLOW_SERVER_STATE_KEY")
server = MCPServer(
    "slow-server",
    request_state_security=RequestStateSecurity(keys=[_key]) if _key else None,
)


def effect(line: str) -> None:
    path = os.environ.get("SLOW_SERVER_EFFECTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


async def count(tool: str, label: str, steps: int, delay: float, ctx: Context) -> str:
    effect(f"start {tool} {label}")
    try:
        for i in range(1, steps + 1):
            await anyio.sleep(delay)
            await ctx.report_progress(i, steps, f"step {i} of {steps}")
    except anyio.get_cancelled_exc_class():
        effect(f"cancelled {tool} {label}")
        raise
    effect(f"end {tool} {label}")
    return f"{tool} {label}: {steps} steps done"


@server.tool(annotations=ToolAnnotations(idempotentHint=False, destructiveHint=True))
async def charge(label: str, steps: int, delay: float, ctx: Context) -> str:
    """Charges a card in `steps` steps of `delay` seconds: never safe to repeat."""
    return await count("charge", label, steps, delay, ctx)


@server.tool(annotations=ToolAnnotations(idempotentHint=True, readOnlyHint=True))
async def report(label: str, steps: int, delay: float, ctx: Context) -> str:
    """Builds a report in `steps` steps of `delay` seconds: safe to repeat."""
    return await count("report", label, steps, delay, ctx)


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called `name` (it answers `NAME grown`) and tells
    listeners that the tools changed."""

    async def grown() -> str:
        return f"{name} grown"

    server.add_tool(grown, name=name, description=f"Added at run time by grow: {name}")
    await ctx.notify_tools_changed()
    return f"added {name}"


class Approval(BaseModel):
    """The go-ahead for a deploy."""

    approve: bool
    region: str


def ask_approval(label: str) -> Elicit[Approval]:
    return Elicit(f"Deploy {label}?", Approval)


@server.tool(annotations=ToolAnnotations(idempotentHint=False, destructiveHint=True))
async def deploy(label: str, approval: Annotated[Approval, Resolve(ask_approval)]) -> str:
    """Deploys `label` once the user approves it and names a region (asked
    mid-call: at 2026-07-28 by answering `InputRequiredResult`)."""
    effect(f"deploy {label} approve={approval.approve} region={approval.region}")
    if not approval.approve:
        return f"deploy {label}: not approved"
    return f"deploy {label}: deployed to {approval.region}"


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
