"""Replay: re-evaluate history with other settings through the engine's driver, and report
every difference.
"""
