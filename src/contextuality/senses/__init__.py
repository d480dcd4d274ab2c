"""Word senses: WordNet data, sense separation, clusterability, the output layer."""
