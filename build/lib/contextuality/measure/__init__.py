"""Measurement: the paper's reference definitions, the geometry beyond it, the one-read engine per layer, the job."""
