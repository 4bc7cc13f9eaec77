"""Fits that turn measurements (profiler samples, transfer measurements) into profiles."""
