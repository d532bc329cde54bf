"""Numba kernels and the single-process Skype engine core. No Ray, no Spark here."""
