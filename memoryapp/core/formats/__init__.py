"""Other memory systems' formats, read into a memoryapp.core.moving.Plan and written back out."""
