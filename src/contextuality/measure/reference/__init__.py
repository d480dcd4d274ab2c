"""The pure float64 definitions the engine is tested against: the paper's measures, exact baselines, word PCs, post-processing, isotropy."""
