"""The HTTP layer both APIs stand on, the agent API (memoryapp/api, /api/v1) and the Redis
Agent Memory Server API (memoryapp/ams, /ams/v1): key authentication and rate limits
(auth.py), the middleware every API request goes through (middleware.py), the schema base
classes and the name rule (schemas.py), the error contract and strict mounting of a router
(contract.py), and what every router shares (common.py). It imports memoryapp.core and
memoryapp.lib, never one of the APIs, so neither API imports the other.
"""
