"""Measurement: the paper's reference definitions, the geometry beyond it, and the fast one-read engine per layer."""
