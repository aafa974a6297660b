"""Executors: run one hook and report what was observed (`engine.effects.Executor`).

One module per hook type; the engine creates only the executors a process needs.
"""
