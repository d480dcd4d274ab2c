"""Static embeddings: the word2vec text format, the nine word benchmarks of Table 1, and their scoring."""
