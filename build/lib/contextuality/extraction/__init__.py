"""The plan (tokens, units, occurrences, losses) and extraction: every layer's vectors into shard files."""
