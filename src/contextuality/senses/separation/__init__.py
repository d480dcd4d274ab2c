"""Labelled sense separation on the usages' layer: one design, its pair scores, controls and rows."""
