"""The corpus: the STS sentences (bundled release files or hub datasets) and the spaCy word index."""
