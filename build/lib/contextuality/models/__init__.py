"""Models: where weights come from (one class per source), safe loading, the random smoke models, ELMo."""
