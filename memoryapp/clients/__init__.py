"""The management commands that are clients of the agent API: they issue a key for their
run and send through `agents.client` (or the MCP relay, `agents.mcp_server`) over the
in-process transport (memoryapp/api/inprocess.py), so what they write takes the path
agents' writes take. The one part of the server that imports `agents/` (issue 36, item 6:
"management commands that post through the client may import it: they are clients")."""
