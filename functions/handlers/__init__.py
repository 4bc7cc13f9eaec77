"""Thin Lambda entry points (trigger, worker, finalize, profiler); logic lives in fasdl."""
