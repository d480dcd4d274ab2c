"""Reporting: the paper's figures, each model's geometry, the summary beside the paper, the claims, Table 1."""
