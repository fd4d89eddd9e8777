"""Bounds shared by the agent API and the dashboard, so that what one accepts the other
accepts too. (`agents/tools.py` repeats MAX_FACT_CHARS in the tool schemas it hands to a
model: the agent side does not import the server.)"""

MAX_FACT_CHARS = 4000  # a memory's content; a finding's fact and query
MAX_MESSAGES_SETTING = 10_000  # an agent's max_messages
MAX_TOKEN_BUDGET = 10_000_000  # a token budget, whole or one section's
MAX_TTL_SECONDS = 365 * 24 * 3600  # a session's time to live: a year
