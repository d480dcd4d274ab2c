"""Word senses: WordNet 3.0 offline, the sense inventory, WordNet usages and context diversity."""
