"""The pure float64 definitions the engine is tested against: the paper's measures, baselines, word PCs, isotropy."""
