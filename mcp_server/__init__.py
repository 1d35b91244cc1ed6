"""The MCP server: the index's query layer served to coding agents as seven read-only tools."""
