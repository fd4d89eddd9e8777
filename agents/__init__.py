"""The agent side of memoryapp: what an agent process imports to talk to the memory
server. Never imports Django."""

from agents.client import ApiError, MemoryClient

__all__ = ["ApiError", "MemoryClient"]
