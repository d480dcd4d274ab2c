"""Reporting: figures, the summary beside the paper, the claims, Table 1, and tables for people."""
