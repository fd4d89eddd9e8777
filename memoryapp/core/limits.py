"""Bounds shared by the APIs (agent and AMS) and the dashboard, so that what one accepts the
others accept too. (`memoryapp/lib/memory_tools.py` repeats MAX_FACT_CHARS in the tool schemas
it hands to a model: lib imports nothing of core.)"""

MAX_FACT_CHARS = 4000  # a memory's content; a finding's fact and query
MAX_MESSAGES_SETTING = 10_000  # an agent's max_messages
MAX_TOKEN_BUDGET = 10_000_000  # a token budget, whole or one section's
MAX_TTL_SECONDS = 365 * 24 * 3600  # a session's time to live: a year
# Integers are bounded to what their columns hold (PostgreSQL `integer`).
MAX_INT = 2_147_483_647
MAX_MESSAGES_PER_TURN = 1000  # one turn's messages, as the agent API and the AMS API take them
MAX_RECORDS = 1000  # AMS records in one request; a record's extracted_from
