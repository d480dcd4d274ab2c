"""The sense measures on the STS layer: self-similarity, the polysemy regressions and clusterability."""
