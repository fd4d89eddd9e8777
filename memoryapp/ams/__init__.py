"""The REST API that Redis Agent Memory Server's published client (`agent-memory-client`)
calls, served on memoryapp's own model at /ams/<key>/v1/: its working memory is a session,
its long-term memories are memories. See api.py for the map."""
