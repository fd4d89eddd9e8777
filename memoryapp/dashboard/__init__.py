"""The HTMX dashboard: people watch agents' memory live and correct it."""
