"""The MCP endpoint's parts below its route (``http/routes/mcp.py``): the JSON-RPC protocol, the
tool registry and the tools themselves. docs/mcp.md says what each tool answers."""
