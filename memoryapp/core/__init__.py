"""The memory model: agents, API keys, sessions, conversation, and the memory they hold."""
