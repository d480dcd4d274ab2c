"""The words and their senses: WordNet, the tagger, the inventory, the usages, glosses and frequency."""
