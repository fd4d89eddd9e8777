"""Pure logic with no database: token counting, pruning, settings parsing."""
