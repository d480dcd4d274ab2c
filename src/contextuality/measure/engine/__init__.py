"""The engine: one array code (numpy or torch) that measures a layer's rows in passes, within a memory budget."""
