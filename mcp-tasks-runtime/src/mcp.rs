//! The MCP front door on rmcp.
